// TrainStream: the Train protocol of one stream without gRPC
// (server/train_stream.h): hello first, then each message to JobState; the
// stream ends after Done on a rank's own stream, at a protocol violation,
// or when the client stops sending, and JobState hears why.
#include "server/train_stream.h"

#include <gtest/gtest.h>

#include "common/manual_scheduler.h"
#include "tests/unit/server/job_state_test_util.h"

namespace psync::server {
namespace {

using namespace job_state_test;

// A world of `world` ranks, all joined on host "h" (so any of them may share a host stream).
struct World {
  explicit World(int world) {
    job = std::make_unique<JobState>(Cfg(world), &sched);
    std::vector<std::shared_ptr<Joined>> js;
    for (int r = 0; r < world; ++r) js.push_back(StartJoin(*job, Req(r)));
    for (auto& j : js) EXPECT_TRUE(j->done && j->r.ok());
  }
  v1::TrainUp Hello(const std::vector<int>& ranks) const {
    v1::TrainUp up;
    up.mutable_hello()->set_job_id("job");
    up.mutable_hello()->set_generation(1);
    if (ranks.size() == 1) up.mutable_hello()->set_rank(ranks[0]);
    if (ranks.size() > 1) {
      for (int r : ranks) up.mutable_hello()->add_ranks(r);
    }
    return up;
  }
  ManualScheduler sched;
  std::unique_ptr<JobState> job;
};

v1::TrainUp ReportUp(int rank, int64_t it) {
  v1::TrainUp up;
  *up.mutable_report() = Rep(it, kFull);
  up.mutable_report()->set_rank(rank);
  return up;
}

v1::TrainUp DoneUp(int rank) {
  v1::TrainUp up;
  up.mutable_done()->set_rank(rank);
  up.mutable_done()->set_exit_reason("completed");
  return up;
}

std::string Reason(JobState& job) {
  v1::StatusResponse s;
  job.FillStatus(&s);
  return s.reason();
}

TEST(TrainStream, HelloFirstOrTheStreamEndsAndItsSinkCloses) {
  World w(2);
  auto q = std::make_shared<PlanQueue>();
  TrainStream s(w.job.get(), q);
  TrainStream::Step step = s.Receive(ReportUp(0, 0));
  EXPECT_FALSE(step.read_more);
  EXPECT_EQ(step.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(step.status), "the first message on a Train stream must be hello{job_id, rank, generation}");
  EXPECT_TRUE(q->closed()) << "never attached: nothing can come, so the writer may finish";

  auto q2 = std::make_shared<PlanQueue>();
  TrainStream closed_early(w.job.get(), q2);
  step = closed_early.InputEnded(/*cancelled=*/false);
  EXPECT_EQ(Msg(step.status), "Train stream closed before hello");
  EXPECT_TRUE(q2->closed());

  v1::TrainUp wrong = w.Hello({0});
  wrong.mutable_hello()->set_job_id("other");
  auto q3 = std::make_shared<PlanQueue>();
  step = TrainStream(w.job.get(), q3).Receive(wrong);
  EXPECT_FALSE(step.read_more);
  EXPECT_EQ(step.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(q3->closed());
  EXPECT_EQ(w.job->state(), v1::JOB_RUNNING) << "a refused hello attaches nothing and loses nobody";
}

TEST(TrainStream, OwnStreamsCarryPlansAndDoneEndsThem) {
  World w(2);
  auto q0 = std::make_shared<PlanQueue>(), q1 = std::make_shared<PlanQueue>();
  TrainStream s0(w.job.get(), q0), s1(w.job.get(), q1);
  ASSERT_TRUE(s0.Receive(w.Hello({0})).read_more);
  ASSERT_TRUE(s1.Receive(w.Hello({1})).read_more);
  ASSERT_TRUE(s0.Receive(ReportUp(/*unused on its own stream*/ 7, 0)).read_more);
  ASSERT_TRUE(s1.Receive(ReportUp(0, 0)).read_more);
  EXPECT_EQ(Next(*q0).iteration(), 0);
  EXPECT_EQ(Next(*q1).iteration(), 0);
  ASSERT_TRUE(w.job->Shutdown("test").stop_after_iteration() >= 0);
  TrainStream::Step step = s0.Receive(DoneUp(0));
  EXPECT_FALSE(step.read_more) << "Done ends a rank's own stream";
  EXPECT_TRUE(step.status.ok()) << step.status;
  EXPECT_TRUE(q0->closed());
  EXPECT_EQ(w.job->state(), v1::JOB_STOPPING);
}

TEST(TrainStream, ProtocolViolationEndsTheStreamAndLosesItsRank) {
  World w(2);
  auto q0 = std::make_shared<PlanQueue>(), q1 = std::make_shared<PlanQueue>();
  TrainStream s0(w.job.get(), q0), s1(w.job.get(), q1);
  ASSERT_TRUE(s0.Receive(w.Hello({0})).read_more);
  ASSERT_TRUE(s1.Receive(w.Hello({1})).read_more);
  TrainStream::Step step = s0.Receive(w.Hello({0}));
  EXPECT_FALSE(step.read_more);
  EXPECT_EQ(Msg(step.status), "hello sent twice on one Train stream");
  EXPECT_EQ(w.job->state(), v1::JOB_ABORTED);
  EXPECT_EQ(Reason(*w.job), "rank 0 (h:100) lost: protocol error: hello sent twice on one Train stream");
  EXPECT_EQ(Next(*q1).action(), v1::ABORT);
  // A host-only message on a rank's own stream is a violation too.
  World w2(1);
  auto q = std::make_shared<PlanQueue>();
  TrainStream s(w2.job.get(), q);
  ASSERT_TRUE(s.Receive(w2.Hello({0})).read_more);
  v1::TrainUp batch;
  *batch.mutable_report_batch()->add_reports() = Rep(0, kFull);
  step = s.Receive(batch);
  EXPECT_EQ(step.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(step.status), "report_batch is for host streams only (hello.ranks); this is the Train stream of rank 0");
}

TEST(TrainStream, HostStreamGoesOnAfterOneRanksDoneAndLosesTheRestWhenItEnds) {
  World w(3);
  auto host = std::make_shared<PlanQueue>(), own = std::make_shared<PlanQueue>();
  TrainStream h(w.job.get(), host), s2(w.job.get(), own);
  ASSERT_TRUE(h.Receive(w.Hello({0, 1})).read_more);
  ASSERT_TRUE(s2.Receive(w.Hello({2})).read_more);
  TrainStream::Step step = h.Receive(DoneUp(0));
  EXPECT_TRUE(step.read_more) << "the host stream still carries rank 1";
  step = h.InputEnded(/*cancelled=*/false);
  EXPECT_FALSE(step.read_more);
  EXPECT_TRUE(step.status.ok()) << step.status;
  EXPECT_EQ(w.job->state(), v1::JOB_ABORTED);
  EXPECT_EQ(Reason(*w.job), "rank 1 (h:101) lost: host Train stream closed");
  EXPECT_EQ(Next(*own).action(), v1::ABORT);
}

}  // namespace
}  // namespace psync::server
