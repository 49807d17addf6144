// Live recovery on the coordinator (coordinator.proto, "Live recovery";
// JobConfig::recovery): the survivors' ABORT plan asks them to rejoin the
// next generation in-process, the rendezvous starts that generation at the
// newest live step and names the rank the others heal from, a fresh
// replacement's own start is not compared, and the new field's limits. No
// network, no clock (ManualScheduler).
#include <gtest/gtest.h>

#include "common/manual_scheduler.h"
#include "server/job_state.h"
#include "server/limits.h"
#include "server/recovery_log.h"
#include "server/rendezvous.h"
#include "tests/unit/server/job_state_test_util.h"

namespace psync::server {
namespace {

using namespace job_state_test;

v1::JoinRequest Live(int rank, int64_t step, int64_t generation = 0) {
  v1::JoinRequest r = Req(rank);
  r.set_live_step(step);
  r.set_generation(generation);
  return r;
}

v1::JoinRequest Fresh(int rank, std::vector<int64_t> checkpoints = {}) {
  v1::JoinRequest r = Req(rank);
  r.set_agree_resume(true);
  for (int64_t s : checkpoints) r.add_checkpoint_steps(s);
  return r;
}

JobConfig LiveCfg(int world, int max_restarts, JobConfig::Recovery recovery = JobConfig::Recovery::kLive) {
  JobConfig c = Cfg(world);
  c.max_restarts = max_restarts;
  c.recovery = recovery;
  return c;
}

std::string LastEvent(JobState& job, v1::EventType type) {
  std::string msg;
  for (const v1::Event& e : job.events().After(0)) {
    if (e.type() == type) msg = e.message();
  }
  return msg;
}

TEST(PickLiveStart, TheNewestLiveStepAndItsLowestRankHealTheRest) {
  EXPECT_FALSE(PickLiveStart({}).has_value());
  EXPECT_FALSE(PickLiveStart({std::nullopt, std::nullopt}).has_value()) << "nobody live: the checkpoint rules";

  std::optional<LiveStart> all = PickLiveStart({7, 7, 7});
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->step, 7);
  EXPECT_FALSE(all->heal) << "every rank holds step 7: nothing to send";
  EXPECT_EQ(all->source, 0);

  // A replacement (no state) and a survivor one step behind are healed
  // from the lowest rank that completed the newest step.
  std::optional<LiveStart> mixed = PickLiveStart({41, std::nullopt, 42, 42});
  ASSERT_TRUE(mixed.has_value());
  EXPECT_EQ(mixed->step, 42);
  EXPECT_EQ(mixed->source, 2);
  EXPECT_TRUE(mixed->heal);
  EXPECT_EQ(mixed->healed, (std::vector<int>{0, 1}));

  std::optional<LiveStart> zero = PickLiveStart({std::nullopt, 0});
  ASSERT_TRUE(zero.has_value()) << "step 0 is a live state too (the first step was interrupted)";
  EXPECT_EQ(zero->step, 0);
  EXPECT_EQ(zero->source, 1);
  EXPECT_EQ(zero->healed, std::vector<int>{0});
}

TEST(LiveRendezvous, AReplacementIsNotComparedAndIsHealedFromTheNewestSurvivor) {
  Rendezvous rv(3);
  // The replacement joins with --resume and its checkpoints; the survivors
  // with their state: no refusal for the differing starts.
  for (const v1::JoinRequest& req : {Fresh(1, {100}), Live(0, 120), Live(2, 121)}) {
    absl::StatusOr<int> r = rv.PickRank(req);
    ASSERT_TRUE(r.ok()) << r.status();
    rv.Add(*r, req);
  }
  EXPECT_EQ(rv.Agree(),
            "live recovery: 2 rank(s) kept their state in memory; starting at step 121; rank 2 (h:102) heals rank 0 "
            "(h:100), rank 1 (h:101)");
  EXPECT_EQ(rv.start_iteration(), 121) << "the newest live step, not the replacement's checkpoint";
  EXPECT_EQ(rv.heal_source(), 2);
}

TEST(LiveRendezvous, SurvivorsAllAtOneStepNeedNoHealing) {
  Rendezvous rv(2);
  rv.Add(0, Live(0, 55));
  rv.Add(1, Live(1, 55));
  EXPECT_EQ(rv.Agree(), "live recovery: 2 rank(s) kept their state in memory; starting at step 55");
  EXPECT_EQ(rv.start_iteration(), 55);
  EXPECT_EQ(rv.heal_source(), -1);
}

TEST(LiveRendezvous, ALiveMemberThatLeavesBeforeTheWorldFormsIsForgotten) {
  Rendezvous rv(2);
  rv.Add(0, Live(0, 9));
  rv.Remove(0);  // its Join was cancelled (the process died while waiting)
  rv.Add(0, Req(0));
  rv.Add(1, Req(1));
  EXPECT_EQ(rv.Agree(), "") << "nobody live any more: the usual start";
  EXPECT_EQ(rv.start_iteration(), 0);
  EXPECT_EQ(rv.heal_source(), -1);
}

TEST(LiveRecovery, SurvivorsAreAskedToRejoinAndTheNextGenerationHealsTheReplacement) {
  ManualScheduler sched;
  JobState job(LiveCfg(3, 2), &sched);
  auto mbs = JoinAll(job, {0, 1, 2});
  ReportAll(job, mbs, 0);
  for (auto& mb : mbs) EXPECT_EQ(Next(*mb).iteration(), 0);
  ASSERT_TRUE(job.Report(mbs[0].ref, Rep(1, kFull)).ok());  // rank 0 ran iteration 1's forward

  job.StreamClosed(mbs[1].ref, "stream closed");  // rank 1 died in iteration 1
  for (int r : {0, 2}) {
    const v1::Plan abort = Next(*mbs[static_cast<size_t>(r)]);
    EXPECT_EQ(abort.action(), v1::ABORT);
    EXPECT_EQ(abort.rejoin_generation(), 2) << "rank " << r << " stays and joins generation 2";
    EXPECT_EQ(abort.reason(),
              "generation 1 aborted: rank 1 (h:101) lost: stream closed; restart 1 of 2 (live recovery): the "
              "survivors rejoin generation 2 with their state, the lost rank's replacement is healed from a peer");
  }
  EXPECT_EQ(job.generation(), 2);
  EXPECT_EQ(job.restarts(), 1);

  // Rank 0 completed step 1 (its last bucket was reduced before rank 1
  // died), rank 2 did not; the replacement has nothing.
  auto j0 = StartJoin(job, Live(0, 1, 2));
  auto j2 = StartJoin(job, Live(2, 0, 2));
  auto j1 = StartJoin(job, Fresh(1));
  ASSERT_TRUE(j0->r.ok()) << j0->r.status();
  ASSERT_TRUE(j1->r.ok()) << j1->r.status();
  ASSERT_TRUE(j2->r.ok()) << j2->r.status();
  for (const auto& j : {j0, j1, j2}) {
    EXPECT_EQ(j->r->start_iteration(), 1);
    ASSERT_TRUE(j->r->has_heal_source());
    EXPECT_EQ(j->r->heal_source(), 0);
    EXPECT_TRUE(j->r->live_recovery()) << "--zero workers keep copies of their shards";
  }
  const std::string complete = LastEvent(job, v1::EVENT_WORLD_COMPLETE);
  EXPECT_EQ(complete.rfind("world complete: 3 ranks (generation 2, from iteration 1): live recovery: 2 rank(s) kept "
                           "their state in memory; starting at step 1; rank 0 (h:100) heals rank 1 (h:101), rank 2 "
                           "(h:102); recovered in place (live) ",
                           0),
            0u)
      << complete;
  EXPECT_NE(complete.find(" s after the loss; 1 iteration started before it computed again"), std::string::npos)
      << complete << ": iteration 1 (rank 0 had started it) is computed again, nothing else";
  v1::StatusResponse st;
  job.FillStatus(&st);
  EXPECT_EQ(st.recovery(), "live");
  EXPECT_EQ(st.live_recoveries(), 1);
  EXPECT_EQ(st.recomputed_iterations(), 1);
  EXPECT_GE(st.last_recovery_s(), 0.0);
  std::vector<TestStream> g2 = {AttachOk(job, OwnHello(0, 2)), AttachOk(job, OwnHello(1, 2)),
                                AttachOk(job, OwnHello(2, 2))};
  ReportAll(job, g2, 1);
  for (auto& mb : g2) EXPECT_EQ(Next(*mb).iteration(), 1) << "the interrupted iteration is computed again";
}

// The bucket layout rank 0's gradient order gave the job stays the job's:
// every generation formed after a loss starts with it (not the initial
// reverse order), because the layout decides the order each gradient
// element is summed in (PlanAggregator::CarryBucketPlan).
// JoinResponse.live_recovery tells --zero workers to keep copies of their
// optimizer shards: only where a lost rank can be recovered in place.
TEST(LiveRecovery, JoinSaysWhetherSurvivorsStay) {
  for (const auto& [recovery, restarts, want] : {std::tuple{JobConfig::Recovery::kLive, 2, true},
                                                 std::tuple{JobConfig::Recovery::kLive, 0, false},
                                                 std::tuple{JobConfig::Recovery::kRestart, 2, false}}) {
    ManualScheduler sched;
    JobConfig cfg = LiveCfg(1, restarts);
    cfg.recovery = recovery;
    JobState job(cfg, &sched);
    auto j = StartJoin(job, Fresh(0));
    ASSERT_TRUE(j->r.ok()) << j->r.status();
    EXPECT_EQ(j->r->live_recovery(), want) << RecoveryName(recovery) << ", --max-restarts=" << restarts;
  }
}

TEST(LiveRecovery, EveryLaterGenerationKeepsTheJobsBucketLayout) {
  ManualScheduler sched;
  JobState job(LiveCfg(2, 3), &sched);
  auto mbs = JoinAll(job, {0, 1});
  ReportAll(job, mbs, 0);
  v1::Report with_order = Rep(1, kFull);
  for (int p = 0; p < 10; ++p) with_order.add_ready_order(p);  // not the initial reverse order
  ASSERT_TRUE(job.Report(mbs[0].ref, with_order).ok());
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(1, kFull)).ok());
  for (int64_t it = 2; it < 6; ++it) ReportAll(job, mbs, it);
  (void)Next(*mbs[0]);
  const v1::Plan p1 = Next(*mbs[0]);
  ASSERT_TRUE(p1.has_bucket_plan());
  const v1::BucketPlan layout = p1.bucket_plan();
  EXPECT_EQ(layout.id(), 1);

  for (int64_t g = 2; g <= 3; ++g) {
    // A loss at iteration 6 (g = 2), then again in the generation after it.
    job.StreamClosed(mbs[1].ref, "stream closed");
    auto j0 = StartJoin(job, Live(0, 6, g));
    auto j1 = StartJoin(job, Fresh(1));
    ASSERT_TRUE(j0->done && j0->r.ok()) << (j0->done ? j0->r.status().ToString() : "still waiting");
    ASSERT_TRUE(j1->r.ok()) << j1->r.status();
    EXPECT_EQ(j0->r->generation(), g);
    EXPECT_EQ(j0->r->start_iteration(), 6);
    EXPECT_EQ(j0->r->initial_bucket_plan().SerializeAsString(), layout.SerializeAsString()) << "generation " << g;
    EXPECT_EQ(j1->r->initial_bucket_plan().SerializeAsString(), layout.SerializeAsString()) << "generation " << g;
    mbs = {AttachOk(job, OwnHello(0, g)), AttachOk(job, OwnHello(1, g))};
  }
}

TEST(LiveRecovery, RestartModeAndTheJobsOwnEndAskNobodyToRejoin) {
  ManualScheduler sched;
  JobState job(LiveCfg(2, 1, JobConfig::Recovery::kRestart), &sched);
  auto mbs = JoinAll(job, {0, 1});
  job.StreamClosed(mbs[1].ref, "stream closed");
  const v1::Plan abort = Next(*mbs[0]);
  EXPECT_EQ(abort.action(), v1::ABORT);
  EXPECT_EQ(abort.rejoin_generation(), 0) << "--recovery=restart: the survivors exit";

  ManualScheduler sched2;
  JobState live(LiveCfg(2, 1), &sched2);
  auto lm = JoinAll(live, {0, 1});
  // The coordinator going away ends the job, not a generation.
  live.Abort("coordinator shutting down");
  const v1::Plan end = Next(*lm[0]);
  EXPECT_EQ(end.action(), v1::ABORT);
  EXPECT_EQ(end.rejoin_generation(), 0) << "the job's own end: nobody stays";
}

TEST(LiveRecovery, NoRestartsLeftEndsTheJobWithoutAskingAnyoneToStay) {
  ManualScheduler sched;
  JobState job(LiveCfg(2, 0), &sched);
  auto mbs = JoinAll(job, {0, 1});
  job.StreamClosed(mbs[1].ref, "stream closed");
  const v1::Plan abort = Next(*mbs[0]);
  EXPECT_EQ(abort.rejoin_generation(), 0);
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
}

TEST(LiveRecovery, LiveStepLimits) {
  EXPECT_TRUE(ValidateJoinRequest(Live(0, 0)).ok());
  EXPECT_TRUE(ValidateJoinRequest(Live(0, kMaxIteration)).ok());
  EXPECT_EQ(Msg(ValidateJoinRequest(Live(0, -1))), "live_step is -1; expected 0..4611686018427387904");
  EXPECT_EQ(Msg(ValidateJoinRequest(Live(0, kMaxIteration + 1))),
            "live_step is 4611686018427387905; expected 0..4611686018427387904");
}

TEST(RecoveryLog, ALossDuringARecoveryExtendsIt) {
  using Clock = RecoveryLog::Clock;
  RecoveryLog log;
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(log.Formed(t0, 0, false), "") << "the first generation: no loss pending";
  log.Lost(t0, 41);
  log.Lost(t0 + std::chrono::milliseconds(300), 43);  // another rank, while the first recovers
  EXPECT_EQ(log.Formed(t0 + std::chrono::milliseconds(500), 42, /*in_place=*/true),
            "recovered in place (live) 0.50 s after the loss; 2 iterations started before it computed again");
  EXPECT_EQ(log.live(), 1u);
  EXPECT_EQ(log.restarted(), 0u);
  EXPECT_EQ(log.recomputed(), 2u);
  EXPECT_DOUBLE_EQ(log.last_seconds(), 0.5);

  log.Lost(t0 + std::chrono::seconds(10), 99);
  EXPECT_EQ(log.Formed(t0 + std::chrono::seconds(12), 80, /*in_place=*/false),
            "restarted 2.00 s after the loss; 20 iterations started before it computed again");
  EXPECT_EQ(log.restarted(), 1u);
  EXPECT_EQ(log.recomputed(), 22u);
  EXPECT_DOUBLE_EQ(log.total_seconds(), 2.5);
  EXPECT_EQ(log.Formed(t0 + std::chrono::seconds(20), 200, false), "") << "a regroup: no loss";
}

TEST(JobConfigRecovery, FlagWordsRoundTrip) {
  EXPECT_EQ(ParseRecovery("live"), JobConfig::Recovery::kLive);
  EXPECT_EQ(ParseRecovery("restart"), JobConfig::Recovery::kRestart);
  EXPECT_FALSE(ParseRecovery("Live").has_value());
  EXPECT_FALSE(ParseRecovery("").has_value());
  EXPECT_STREQ(RecoveryName(JobConfig::Recovery::kLive), "live");
  EXPECT_STREQ(RecoveryName(JobConfig::Recovery::kRestart), "restart");
}

}  // namespace
}  // namespace psync::server
