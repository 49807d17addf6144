// JobState generations (restartable mode, JobConfig::max_restarts): a lost
// rank ends the generation, the world rejoins as the next one from an agreed
// start iteration, calls of an ended generation are refused, and the job
// still ends once the restarts are used up. No network, no clock: Joins
// complete through callbacks and time moves only through a ManualScheduler.
#include <gtest/gtest.h>

#include "server/job_state.h"
#include "common/manual_scheduler.h"
#include "tests/unit/server/job_state_test_util.h"

namespace psync::server {
namespace {

using namespace job_state_test;

JobConfig Restartable(int world, int max_restarts) {
  JobConfig c = Cfg(world);
  c.max_restarts = max_restarts;
  c.recovery = JobConfig::Recovery::kRestart;  // the path these tests check (live: live_recovery_test.cc)
  return c;
}

v1::JoinRequest ReqAt(int rank, int64_t start, int64_t generation = 0) {
  v1::JoinRequest r = Req(rank);
  r.set_start_iteration(start);
  r.set_generation(generation);
  return r;
}

std::vector<v1::Event> EventsOf(JobState& job, v1::EventType type) {
  std::vector<v1::Event> out;
  for (const v1::Event& e : job.events().After(0)) {
    if (e.type() == type) out.push_back(e);
  }
  return out;
}

TEST(JobRestart, LostRankAbortsGenerationAndTheWorldRejoinsFromItsStartIteration) {
  ManualScheduler sched;
  JobState job(Restartable(2, 2), &sched);
  std::vector<std::string> dropped_prefixes;
  job.SetGenerationEndHook([&](const std::string& prefix) { dropped_prefixes.push_back(prefix); });
  auto mbs = JoinAll(job, {0, 1});
  ReportAll(job, mbs, 0);
  ReportAll(job, mbs, 1);
  EXPECT_EQ(Next(*mbs[0]).iteration(), 0);
  EXPECT_EQ(Next(*mbs[0]).iteration(), 1);

  job.StreamClosed(mbs[1].ref, "stream closed");  // rank 1 died
  const v1::Plan abort = Next(*mbs[0]);
  EXPECT_EQ(abort.action(), v1::ABORT);
  EXPECT_EQ(abort.reason(),
            "generation 1 aborted: rank 1 (h:101) lost: stream closed; restart 1 of 2: every rank must Join "
            "generation 2");
  EXPECT_TRUE(mbs[0]->closed());
  EXPECT_EQ(job.state(), v1::JOB_WAITING);
  EXPECT_FALSE(job.Ended());
  EXPECT_EQ(job.generation(), 2);
  EXPECT_EQ(job.restarts(), 1);
  ASSERT_EQ(dropped_prefixes.size(), 1u) << "generation 1's store keys are dropped";
  const std::string prefix1 = dropped_prefixes[0];
  EXPECT_EQ(prefix1.rfind("job/g1-", 0), 0u) << prefix1;

  // The event log names the lost rank and the generation it was lost in.
  auto lost = EventsOf(job, v1::EVENT_LOST);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].rank(), 1);
  EXPECT_EQ(lost[0].generation(), 1);
  EXPECT_EQ(lost[0].message(), "rank 1 (h:101) lost: stream closed (generation 1)");
  auto restarting = EventsOf(job, v1::EVENT_RESTARTING);
  ASSERT_EQ(restarting.size(), 1u);
  EXPECT_EQ(restarting[0].rank(), 1);
  EXPECT_EQ(restarting[0].generation(), 1);
  EXPECT_FALSE(IsFinalEvent(restarting[0])) << "a Watch goes on through a restart";

  v1::StatusResponse st;
  job.FillStatus(&st);
  EXPECT_EQ(st.generation(), 2);
  EXPECT_EQ(st.restarts(), 1);
  EXPECT_EQ(st.max_restarts(), 2);
  EXPECT_EQ(st.joined(), 0);
  EXPECT_EQ(st.last_restart_reason(), "generation 1: rank 1 (h:101) lost: stream closed");
  EXPECT_EQ(st.reason(),
            "waiting for 2 ranks to Join generation 2 (restart 1 of 2; generation 1 aborted: rank 1 (h:101) lost: "
            "stream closed)");

  // Generation 2: both ranks resume from the checkpoint of step 2.
  auto j0 = StartJoin(job, ReqAt(0, 2));
  auto j1 = StartJoin(job, ReqAt(1, 2, /*generation=*/2));
  ASSERT_TRUE(j0->r.ok()) << j0->r.status();
  ASSERT_TRUE(j1->r.ok()) << j1->r.status();
  EXPECT_EQ(j0->r->generation(), 2);
  EXPECT_EQ(j0->r->start_iteration(), 2);
  EXPECT_NE(j0->r->store_prefix(), prefix1);
  EXPECT_NE(j0->r->store_prefix().find("/g2-"), std::string::npos) << j0->r->store_prefix();
  EXPECT_EQ(job.state(), v1::JOB_RUNNING);
  std::vector<TestStream> g2 = {AttachOk(job, OwnHello(0, 2)), AttachOk(job, OwnHello(1, 2))};
  EXPECT_EQ(job.Report(g2[0].ref, Rep(0, kFull)).code(), absl::StatusCode::kInvalidArgument)
      << "generation 2 starts at iteration 2";
  ReportAll(job, g2, 2);
  ReportAll(job, g2, 3);
  for (auto& mb : g2) {
    EXPECT_EQ(Next(*mb).iteration(), 2);
    EXPECT_EQ(Next(*mb).iteration(), 3);
  }
  job.FillStatus(&st);
  EXPECT_EQ(st.state(), v1::JOB_RUNNING);
  EXPECT_EQ(st.iteration(), 3);
  EXPECT_EQ(st.start_iteration(), 2);
  EXPECT_EQ(st.reason(), "");
  v1::Done d;
  d.set_exit_reason("completed");
  ASSERT_TRUE(job.Done(g2[0].ref, d).ok());
  ASSERT_TRUE(job.Done(g2[1].ref, d).ok());
  EXPECT_EQ(job.state(), v1::JOB_FINISHED);
}

TEST(JobRestart, WorkerOfAnEndedGenerationIsRefused) {
  ManualScheduler sched;
  JobState job(Restartable(2, 3), &sched);
  auto mbs = JoinAll(job, {0, 1});
  ReportAll(job, mbs, 0);
  v1::Done failed;
  failed.set_exit_code(1);
  failed.set_exit_reason("CUDA out of memory");
  ASSERT_TRUE(job.Done(mbs[0].ref, failed).ok());  // a failing rank counts as lost
  EXPECT_EQ(job.generation(), 2);
  EXPECT_EQ(EventsOf(job, v1::EVENT_LOST).at(0).message(),
            "rank 0 (h:100) lost: failed (exit code 1): CUDA out of memory (generation 1)");

  // Rank 1 of generation 1 did not notice and goes on: every call is refused.
  const absl::Status report = job.Report(mbs[1].ref, Rep(1, kFull));
  EXPECT_EQ(report.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Msg(report),
            "rank 1 belongs to generation 1 of job 'job', which has ended (generation 1: rank 0 (h:100) lost: failed "
            "(exit code 1): CUDA out of memory); the job is at generation 2: this worker must exit, and a new one "
            "Join generation 2");
  v1::Heartbeat hb;
  hb.set_rank(1);
  EXPECT_EQ(job.Heartbeat(mbs[1].ref, hb).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(job.Done(mbs[1].ref, v1::Done()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(job.Attach(OwnHello(1, 1), std::make_shared<PlanQueue>()).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // A Join that names the old generation is refused; so is one from the future.
  auto old = StartJoin(job, ReqAt(1, 0, /*generation=*/1));
  ASSERT_TRUE(old->done);
  EXPECT_EQ(old->r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(old->r.status()).find("asks to join generation 1 of job 'job', which has ended"), std::string::npos)
      << old->r.status();
  auto future = StartJoin(job, ReqAt(1, 0, /*generation=*/3));
  ASSERT_TRUE(future->done);
  EXPECT_EQ(Msg(future->r.status()),
            "this worker asks to join generation 3 of job 'job', but the next one to form is generation 2 (1 of 3 "
            "restarts used)");

  // The old stream closing later does not touch generation 2's rank 1.
  auto j1 = StartJoin(job, ReqAt(1, 0));
  EXPECT_FALSE(j1->done);
  job.StreamClosed(mbs[1].ref, "stream closed");
  EXPECT_EQ(job.state(), v1::JOB_WAITING);
  EXPECT_EQ(job.generation(), 2);
  v1::WorkersResponse w;
  job.FillWorkers(&w);
  ASSERT_EQ(w.workers_size(), 1);
  EXPECT_EQ(w.workers(0).state(), v1::WORKER_JOINED);
}

TEST(JobRestart, RanksMustAgreeOnTheStartIteration) {
  ManualScheduler sched;
  JobState job(Restartable(3, 1), &sched);
  auto j0 = StartJoin(job, ReqAt(0, 100));
  auto j2 = StartJoin(job, ReqAt(2, 90));
  ASSERT_TRUE(j2->done);
  EXPECT_EQ(j2->r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Msg(j2->r.status()),
            "rank 2 (h:102) starts at iteration 90 but the first worker's (rank 0) starts at iteration 100: every "
            "rank must resume from the same checkpoint step (is the checkpoint directory shared, and did a newer "
            "checkpoint appear while the ranks started?)");
  EXPECT_FALSE(j0->done) << "the agreeing rank keeps waiting";
  auto bad = StartJoin(job, ReqAt(1, -1));
  EXPECT_EQ(Msg(bad->r.status()), "start_iteration is -1; expected 0..4611686018427387904");
}

TEST(JobRestart, RestartsUsedUpTheNextLossAbortsTheJob) {
  ManualScheduler sched;
  JobState job(Restartable(2, 1), &sched);
  auto mbs = JoinAll(job, {0, 1});
  job.StreamClosed(mbs[0].ref, "stream closed");
  ASSERT_EQ(job.generation(), 2);
  auto g2 = JoinAll(job, {0, 1});
  ASSERT_EQ(job.state(), v1::JOB_RUNNING);
  ReportAll(job, g2, 0);
  job.CheckLiveness(JobState::Clock::now() + 60s);  // both silent: one is blamed
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  EXPECT_TRUE(job.Ended());
  EXPECT_EQ(job.restarts(), 1);
  v1::StatusResponse st;
  job.FillStatus(&st);
  EXPECT_NE(st.reason().find("(generation 2; all 1 restarts used)"), std::string::npos) << st.reason();
  auto aborted = EventsOf(job, v1::EVENT_ABORTED);
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(aborted[0].generation(), 2);
  auto late = StartJoin(job, Req(0));
  EXPECT_EQ(late->r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(late->r.status()).find("was aborted"), std::string::npos);
}

TEST(JobRestart, JoinWhileAGenerationRunsWaitsForTheNextOne) {
  ManualScheduler sched;
  JobState job(Restartable(2, 1), &sched);
  auto mbs = JoinAll(job, {0, 1});
  // A restarted rank 1 joins before the coordinator noticed the old one died.
  auto early = StartJoin(job, ReqAt(1, 0));
  EXPECT_FALSE(early->done);
  EXPECT_NE(early->ticket, 0u);
  job.StreamClosed(mbs[1].ref, "stream closed");
  EXPECT_EQ(job.state(), v1::JOB_WAITING);
  EXPECT_FALSE(early->done) << "it joined generation 2 and waits for rank 0";
  v1::StatusResponse st;
  job.FillStatus(&st);
  EXPECT_EQ(st.joined(), 1);
  auto j0 = StartJoin(job, ReqAt(0, 0));
  ASSERT_TRUE(early->done && j0->done);
  ASSERT_TRUE(early->r.ok()) << early->r.status();
  EXPECT_EQ(early->r->rank(), 1);
  EXPECT_EQ(early->r->generation(), 2);
  EXPECT_EQ(job.state(), v1::JOB_RUNNING);

  // No restart left: a Join while running is refused at once, as without restarts.
  auto full = StartJoin(job, Req(-1));
  ASSERT_TRUE(full->done);
  EXPECT_EQ(full->r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(JobRestart, QueuedJoinEndsAtItsDeadlineOrWithTheJob) {
  ManualScheduler sched;
  JobState job(Restartable(2, 2), &sched);
  auto mbs = JoinAll(job, {0, 1});
  auto extra = StartJoin(job, Req(-1));
  EXPECT_FALSE(extra->done);
  sched.Advance(5001ms);  // the join timeout of Cfg
  ASSERT_TRUE(extra->done);
  EXPECT_EQ(extra->r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Msg(extra->r.status()),
            "generation 1 of job 'job' still runs after 5s: this Join waited for generation 2, which forms only once "
            "a rank of generation 1 is lost (is this worker extra, or is its rank still running?)");

  auto cancelled = StartJoin(job, Req(-1));
  job.CancelJoin(cancelled->ticket);
  ASSERT_TRUE(cancelled->done);
  EXPECT_EQ(cancelled->r.status().code(), absl::StatusCode::kCancelled);

  auto queued = StartJoin(job, Req(-1));
  EXPECT_FALSE(queued->done);
  job.Shutdown("");  // stopping: no next generation will form
  ASSERT_TRUE(queued->done);
  EXPECT_NE(Msg(queued->r.status()).find("is stopping"), std::string::npos) << queued->r.status();
  EXPECT_EQ(sched.pending(), 0u) << "the queued Joins' deadlines are cancelled";
}

TEST(JobRestart, LossWhileStoppingEndsTheJob) {
  ManualScheduler sched;
  JobState job(Restartable(2, 5), &sched);
  auto mbs = JoinAll(job, {0, 1});
  ReportAll(job, mbs, 0);
  job.Shutdown("stop");
  job.StreamClosed(mbs[1].ref, "stream closed");
  EXPECT_EQ(job.state(), v1::JOB_ABORTED) << "the user asked the job to end; it is not restarted";
  EXPECT_EQ(job.generation(), 1);
}

TEST(JobRestart, WithoutMaxRestartsALostRankAbortsTheJobAsBefore) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto mbs = JoinAll(job, {0, 1});
  job.StreamClosed(mbs[1].ref, "stream closed");
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  EXPECT_EQ(Next(*mbs[0]).reason(), "rank 1 (h:101) lost: stream closed");
  EXPECT_EQ(EventsOf(job, v1::EVENT_LOST).at(0).message(), "rank 1 (h:101) lost: stream closed");
  EXPECT_TRUE(EventsOf(job, v1::EVENT_RESTARTING).empty());
  v1::StatusResponse st;
  job.FillStatus(&st);
  EXPECT_EQ(st.generation(), 1);
  EXPECT_EQ(st.restarts(), 0);
  EXPECT_EQ(st.max_restarts(), 0);
}

}  // namespace
}  // namespace psync::server
