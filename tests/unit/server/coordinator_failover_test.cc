// Coordinator failover on the coordinator (coordinator.proto, "Coordinator
// failover", "Resume"): a coordinator that met no job rebuilds the running
// generation from its workers' Resume, sends again exactly the plans the
// old one sent (so the ranks that hold them drop them), keeps a stop some
// rank holds, loses a rank that never comes back, and refuses what it must:
// a Resume from a rank that obeyed a newer coordinator (fencing), one that
// does not fit the job, and one after it formed a generation of its own.
// No network, no clock (ManualScheduler).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/manual_scheduler.h"
#include "server/job_resume.h"
#include "server/job_state.h"
#include "tests/unit/server/job_state_test_util.h"

namespace psync::server {
namespace {

using namespace job_state_test;

JobConfig EpochCfg(int world, int64_t epoch, int max_restarts = 0) {
  JobConfig c = Cfg(world);
  c.epoch = epoch;
  c.max_restarts = max_restarts;
  return c;
}

// What rank `rank` of generation `g` (world `world`, started at 0, K = 2)
// tells a new coordinator when it holds the plans before `next_plan`.
v1::Hello ResumeOf(int rank, int64_t g, int64_t next_plan, int world, int64_t epoch, int64_t stop_after = -1) {
  v1::Hello h = OwnHello(rank, g);
  v1::Resume* r = h.mutable_resume();
  *r->mutable_join() = Req(rank);
  r->set_world_size(world);
  r->set_start_iteration(0);
  r->set_plan_lookahead(2);
  r->set_next_plan(next_plan);
  r->set_bucket_plan_announced_in(-1);
  r->set_stop_after(stop_after);
  if (stop_after >= 0) r->set_stop_reason("shutdown requested");
  r->set_epoch(epoch);
  return h;
}

// Every plan queued on `s`, in order.
std::vector<v1::Plan> Drain(const TestStream& s) {
  std::vector<v1::Plan> out;
  v1::Plan p;
  while (s->TryPop(&p)) out.push_back(p);
  return out;
}

TEST(CoordinatorFailover, ANewCoordinatorResumesWhereTheWorkersAreWithTheSamePlans) {
  ManualScheduler sched;
  JobState old(EpochCfg(2, 100), &sched);
  std::vector<TestStream> s = JoinAll(old, {0, 1});
  // Iteration i: parameter i unused on both ranks, so every plan differs.
  auto report = [](int64_t i) {
    std::string used = kFull;
    used[static_cast<size_t>(i / 8)] = static_cast<char>(used[static_cast<size_t>(i / 8)] & ~(1 << (i % 8)));
    return Rep(i, used);
  };
  for (int64_t i = 0; i < 5; ++i) {
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(old.Report(s[static_cast<size_t>(r)].ref, report(i)).ok());
  }
  const std::vector<v1::Plan> sent = Drain(s[0]);
  ASSERT_EQ(sent.size(), 5u);
  EXPECT_EQ(sent[0].epoch(), 100);

  // The old coordinator dies. Rank 0 holds Plans 0..4, rank 1 only 0..3.
  JobState fresh(EpochCfg(2, 200), &sched);
  TestStream r0 = AttachOk(fresh, ResumeOf(0, 1, 5, 2, 100));
  EXPECT_EQ(fresh.state(), v1::JOB_RUNNING);
  EXPECT_EQ(fresh.generation(), 1);
  // Each rank sends its reports again, back to next_plan - 2K; the old ones
  // (before next_plan - K of the first Resume: 3) are dropped.
  for (int64_t i = 1; i <= 6; ++i) ASSERT_TRUE(fresh.Report(r0.ref, report(i)).ok()) << i;
  EXPECT_EQ(r0->size(), 0u) << "no plan before every rank re-attached";
  TestStream r1 = AttachOk(fresh, ResumeOf(1, 1, 4, 2, 100));
  for (int64_t i = 0; i <= 5; ++i) ASSERT_TRUE(fresh.Report(r1.ref, report(i)).ok()) << i;

  const std::vector<v1::Plan> again = Drain(r1);
  ASSERT_EQ(again.size(), 3u) << "Plans 3, 4 and 5";
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(again[k].iteration(), static_cast<int64_t>(3 + k));
    EXPECT_EQ(again[k].globally_unused(), sent[3 + k].globally_unused()) << "the same plan as the old coordinator's";
    EXPECT_EQ(again[k].action(), v1::CONTINUE);
    EXPECT_EQ(again[k].epoch(), 200) << "the new coordinator's epoch";
  }
  EXPECT_EQ(again[2].iteration(), 5);
  EXPECT_EQ(Drain(r0).size(), 3u) << "rank 0 gets them too, and drops the two it holds";
  // Training goes on as before.
  ASSERT_TRUE(fresh.Report(r0.ref, report(7)).ok());
  ASSERT_TRUE(fresh.Report(r1.ref, report(6)).ok());
  EXPECT_EQ(Next(*r1).iteration(), 6);

  bool restarted = false;
  for (const v1::Event& e : fresh.events().After(0)) {
    if (e.type() == v1::EVENT_COORDINATOR_RESTARTED) {
      restarted = true;
      EXPECT_NE(e.message().find("generation 1 of 2 ranks resumes at iteration 3"), std::string::npos) << e.message();
    }
  }
  EXPECT_TRUE(restarted);
}

// The bucket plan every rank holds (announced before the plans resume) is
// the new coordinator's plan in force; one that is not a layout of every
// parameter once is not taken.
TEST(CoordinatorFailover, TheHeldBucketPlanIsKeptOnlyWhenItIsWhole) {
  auto held = [](std::vector<std::vector<int>> buckets) {
    v1::Hello h = ResumeOf(0, 1, 5, 2, 100);
    v1::BucketPlan* bp = h.mutable_resume()->mutable_bucket_plan();
    bp->set_id(1);
    bp->set_applies_from_iteration(3);
    for (const auto& b : buckets) {
      v1::Bucket* out = bp->add_buckets();
      for (int p : b) out->add_param_index(p);
    }
    h.mutable_resume()->set_bucket_plan_announced_in(1);
    return h;
  };
  ManualScheduler sched;
  JobState whole(EpochCfg(2, 200), &sched);
  AttachOk(whole, held({{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}}));
  v1::BucketsResponse b;
  whole.FillBuckets(&b);
  EXPECT_EQ(b.plan().id(), 1);
  ASSERT_EQ(b.plan().buckets_size(), 2);
  EXPECT_EQ(b.plan().buckets(0).param_index(0), 0);

  JobState repeated(EpochCfg(2, 200), &sched);
  AttachOk(repeated, held({{0, 1, 2, 3, 4}, {5, 6, 7, 8, 8}}));
  repeated.FillBuckets(&b);
  EXPECT_EQ(b.plan().id(), 0) << "parameter 8 twice, 9 never: the initial plan stays";
}

TEST(CoordinatorFailover, AStopSomeRankHoldsIsKeptAsItWas) {
  ManualScheduler sched;
  JobState fresh(EpochCfg(2, 200), &sched);
  // Rank 0 did not get the STOP_AFTER plan (Plan{5}); rank 1 did: stop after 6.
  TestStream r0 = AttachOk(fresh, ResumeOf(0, 1, 5, 2, 100));
  TestStream r1 = AttachOk(fresh, ResumeOf(1, 1, 6, 2, 100, /*stop_after=*/6));
  EXPECT_EQ(fresh.state(), v1::JOB_STOPPING);
  for (int64_t i = 3; i <= 6; ++i) {
    ASSERT_TRUE(fresh.Report(r0.ref, Rep(i, kFull)).ok()) << i;
    ASSERT_TRUE(fresh.Report(r1.ref, Rep(i, kFull)).ok()) << i;
  }
  const std::vector<v1::Plan> plans = Drain(r0);
  ASSERT_EQ(plans.size(), 4u);
  for (const v1::Plan& p : plans) {
    EXPECT_EQ(p.action(), v1::STOP_AFTER) << "iteration " << p.iteration();
    EXPECT_EQ(p.stop_after_iteration(), 6) << "the stop the rank holds, not a new one";
  }
  EXPECT_FALSE(fresh.Report(r0.ref, Rep(7, kFull)).ok()) << "nothing after the stop";
}

TEST(CoordinatorFailover, ARankThatDoesNotComeBackIsLost) {
  ManualScheduler sched;
  JobState fresh(EpochCfg(2, 200, /*max_restarts=*/1), &sched);
  TestStream r0 = AttachOk(fresh, ResumeOf(0, 3, 10, 2, 100));
  const auto later = std::chrono::steady_clock::now() + fresh.config().heartbeat_timeout + 1s;
  fresh.CheckLiveness(later);
  // Live recovery goes on as usual: rank 0 is asked to rejoin generation 4.
  v1::Plan abort;
  bool got = false;
  while (r0->TryPop(&abort)) got = abort.action() == v1::ABORT;
  ASSERT_TRUE(got);
  EXPECT_EQ(abort.rejoin_generation(), 4);
  EXPECT_NE(abort.reason().find("rank 1 lost: did not re-attach"), std::string::npos) << abort.reason();
  EXPECT_EQ(fresh.generation(), 4);
}

TEST(CoordinatorFailover, ARankThatObeyedANewerCoordinatorFencesThisOne) {
  ManualScheduler sched;
  JobState stale(EpochCfg(2, 100), &sched);
  std::string fenced;
  JobResume::SetFencedHook(stale, [&](const std::string& why) { fenced = why; });
  absl::StatusOr<StreamRef> ref = stale.Attach(ResumeOf(0, 1, 5, 2, 300), std::make_shared<PlanQueue>());
  ASSERT_FALSE(ref.ok());
  EXPECT_EQ(ref.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(ref.status()).find("epoch 300, newer than this coordinator's epoch 100"), std::string::npos)
      << ref.status();
  EXPECT_EQ(fenced, Msg(ref.status()));
  EXPECT_EQ(stale.state(), v1::JOB_WAITING) << "it drives nobody";
}

TEST(CoordinatorFailover, AResumeThatDoesNotFitIsRefusedNamingTheValue) {
  ManualScheduler sched;
  JobState fresh(EpochCfg(2, 200), &sched);
  absl::StatusOr<StreamRef> big = fresh.Attach(ResumeOf(0, 1, 5, 4, 100), std::make_shared<PlanQueue>());
  ASSERT_FALSE(big.ok());
  EXPECT_NE(Msg(big.status()).find("with 4 ranks, but job 'job' has world size 2"), std::string::npos) << big.status();

  AttachOk(fresh, ResumeOf(0, 1, 5, 2, 100));
  v1::Hello other = ResumeOf(1, 1, 5, 2, 100);
  other.mutable_resume()->set_start_iteration(7);
  other.mutable_resume()->set_next_plan(9);
  absl::StatusOr<StreamRef> r1 = fresh.Attach(other, std::make_shared<PlanQueue>());
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(Msg(r1.status()).find("rank 1 resumes generation 1 with start iteration 7 but the first rank to resume "
                                   "had 0"),
            std::string::npos)
      << r1.status();
  // A rank that resumes again (its new stream broke too) takes over from its own stream.
  EXPECT_TRUE(fresh.Attach(ResumeOf(0, 1, 5, 2, 100), std::make_shared<PlanQueue>()).ok());
}

TEST(CoordinatorFailover, NoResumeOnceThisCoordinatorFormedItsOwnGeneration) {
  ManualScheduler sched;
  JobState fresh(EpochCfg(2, 200), &sched);
  std::vector<TestStream> own = JoinAll(fresh, {0, 1});
  absl::StatusOr<StreamRef> ref = fresh.Attach(ResumeOf(1, 5, 5, 2, 100), std::make_shared<PlanQueue>());
  ASSERT_FALSE(ref.ok());
  EXPECT_NE(Msg(ref.status()).find("formed generation 1 of its own"), std::string::npos) << ref.status();
}

// A replacement for a rank lost while the coordinator was down may Join the
// new coordinator before the survivors re-register: its Join waits for the
// next generation, which the lost rank's loss opens, and forms it with the
// survivor that rejoins.
TEST(CoordinatorFailover, AFreshJoinWaitsForTheGenerationAfterTheResumedOne) {
  ManualScheduler sched;
  JobState fresh(EpochCfg(2, 200, /*max_restarts=*/1), &sched);
  std::shared_ptr<Joined> replacement = StartJoin(fresh, Req(1));
  TestStream r0 = AttachOk(fresh, ResumeOf(0, 1, 5, 2, 100));
  EXPECT_EQ(fresh.generation(), 1);
  fresh.CheckLiveness(std::chrono::steady_clock::now() + fresh.config().heartbeat_timeout + 1s);
  EXPECT_EQ(fresh.generation(), 2) << "rank 1 did not re-attach: lost";
  EXPECT_FALSE(replacement->done) << "it joined generation 2 and waits for rank 0";
  v1::JoinRequest live = Req(0);
  live.set_live_step(5);
  live.set_generation(2);
  std::shared_ptr<Joined> survivor = StartJoin(fresh, live);
  ASSERT_TRUE(survivor->done && replacement->done);
  ASSERT_TRUE(replacement->r.ok()) << replacement->r.status();
  EXPECT_EQ(replacement->r->rank(), 1);
  EXPECT_EQ(replacement->r->generation(), 2);
  EXPECT_EQ(replacement->r->start_iteration(), 5) << "the survivor's live step";
}

// The coordinator ran on (or was paused) while a rank's stream broke: the
// rank attaches again on a new stream, taking over from the old one, gets
// the plans it missed, and its reports sent again are dropped.
TEST(CoordinatorFailover, ARankWhoseStreamBrokeReattachesAndGetsThePlansItMissed) {
  ManualScheduler sched;
  JobState job(EpochCfg(2, 100), &sched);
  std::vector<TestStream> s = JoinAll(job, {0, 1});
  for (int64_t i = 0; i < 4; ++i) ReportAll(job, s, i);
  ASSERT_EQ(Drain(s[1]).size(), 4u);
  // Rank 1 holds the plans before 2 only (2 and 3 were in flight).
  TestStream again = AttachOk(job, ResumeOf(1, 1, 2, 2, 100));
  const std::vector<v1::Plan> missed = Drain(again);
  ASSERT_EQ(missed.size(), 2u);
  EXPECT_EQ(missed[0].iteration(), 2);
  EXPECT_EQ(missed[1].iteration(), 3);
  for (int64_t i = 0; i < 4; ++i) ASSERT_TRUE(job.Report(again.ref, Rep(i, kFull)).ok()) << "sent again: dropped";
  job.StreamClosed(s[1].ref, "stream closed");  // the old stream's end comes late: it speaks for nobody now
  EXPECT_EQ(job.state(), v1::JOB_RUNNING);
  ASSERT_TRUE(job.Report(s[0].ref, Rep(4, kFull)).ok());
  ASSERT_TRUE(job.Report(again.ref, Rep(4, kFull)).ok());
  EXPECT_EQ(Next(*again).iteration(), 4);
}

// A coordinator that did not run (SIGSTOP) for longer than the heartbeat
// timeout blames nobody for the silence, holds the streams that broke
// meanwhile for a re-attach, and loses the ranks that do not come back.
TEST(CoordinatorFailover, APausedCoordinatorHoldsBrokenStreamsForAReattach) {
  ManualScheduler sched;
  JobState job(EpochCfg(2, 100), &sched);
  std::vector<TestStream> s = JoinAll(job, {0, 1});
  ReportAll(job, s, 0);
  const auto t0 = std::chrono::steady_clock::now();
  job.CheckLiveness(t0, /*ticker=*/true);
  const auto resumed = t0 + 10s;  // the pause's end
  job.CheckLiveness(resumed, /*ticker=*/true);
  EXPECT_EQ(job.state(), v1::JOB_RUNNING) << "its own pause is no rank's silence";
  job.StreamClosed(s[0].ref, "stream closed");
  job.StreamClosed(s[1].ref, "stream closed");
  EXPECT_EQ(job.state(), v1::JOB_RUNNING) << "both held for a re-attach";
  TestStream r0 = AttachOk(job, ResumeOf(0, 1, 1, 2, 100));
  job.CheckLiveness(resumed + job.config().heartbeat_timeout + 1s, /*ticker=*/true);
  EXPECT_EQ(job.state(), v1::JOB_ABORTED) << "rank 1 never came back";
  v1::Plan abort;
  bool got = false;
  while (r0->TryPop(&abort)) got = abort.action() == v1::ABORT;
  ASSERT_TRUE(got);
  EXPECT_NE(abort.reason().find("rank 1 (h:101) lost: Train stream broke while the coordinator was paused"),
            std::string::npos)
      << abort.reason();
}

}  // namespace
}  // namespace psync::server
