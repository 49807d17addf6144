// Host streams (coordinator.proto "Host streams"): one Train stream carrying
// several ranks of one host; a rank's own stream is a host stream of one
// rank. JobState without a network, as in job_state_test.cc: each stream's
// sink is a PlanQueue.
#include <gtest/gtest.h>

#include "server/job_state.h"
#include "common/manual_scheduler.h"
#include "tests/unit/server/job_state_test_util.h"

namespace psync::server {
namespace {

using namespace std::chrono_literals;
using namespace job_state_test;

// A world of `world` ranks; rank r runs on host "host<r / per_host>".
struct HostWorld {
  explicit HostWorld(int world, int per_host = 2, int max_restarts = 0) : world(world), per_host(per_host) {
    JobConfig c = Cfg(world);
    c.max_restarts = max_restarts;
    job = std::make_unique<JobState>(c, &sched);
    std::vector<std::shared_ptr<Joined>> js;
    for (int r = 0; r < world; ++r) {
      v1::JoinRequest req = Req(r);
      req.set_host_id(Host(r));
      js.push_back(StartJoin(*job, req));
    }
    for (auto& j : js) EXPECT_TRUE(j->done && j->r.ok());
    generation = js[0]->r->generation();
  }
  std::string Host(int r) const { return "host" + std::to_string(r / per_host); }
  v1::Hello HostHello(const std::vector<int>& ranks) const {
    v1::Hello h;
    h.set_job_id("job");
    h.set_generation(generation);
    for (int r : ranks) h.add_ranks(r);
    return h;
  }
  // Attaches a host stream for `ranks`; EXPECTs success.
  TestStream Attach(const std::vector<int>& ranks) { return AttachOk(*job, HostHello(ranks)); }
  absl::Status Batch(const TestStream& s, const std::vector<int>& ranks, int64_t it) {
    v1::ReportBatch b;
    for (int r : ranks) {
      *b.add_reports() = Rep(it, kFull);
      b.mutable_reports()->rbegin()->set_rank(r);
    }
    return job->ReportBatch(s.ref, b);
  }

  int world, per_host;
  int64_t generation = 0;
  ManualScheduler sched;
  std::unique_ptr<JobState> job;
};

TEST(HostStream, EachPlanOncePerStreamAndSameAsSingleRankStreams) {
  HostWorld w(5);  // hosts: {0,1} {2,3} {4}
  auto a = w.Attach({0, 1});
  auto b = w.Attach({3, 2});  // any order
  v1::Hello single;
  single.set_job_id("job");
  single.set_rank(4);
  single.set_generation(w.generation);
  TestStream c = AttachOk(*w.job, single);
  for (int64_t it = 0; it < 3; ++it) {
    ASSERT_TRUE(w.Batch(a, {0, 1}, it).ok());
    ASSERT_TRUE(w.Batch(b, {2, 3}, it).ok());
    EXPECT_EQ(a->size(), 0u) << "no plan before every rank reported";
    ASSERT_TRUE(w.job->Report(c.ref, Rep(it, kFull)).ok());
    // One plan per stream per iteration, identical everywhere.
    ASSERT_EQ(a->size(), 1u);
    ASSERT_EQ(b->size(), 1u);
    ASSERT_EQ(c->size(), 1u);
    v1::Plan pa = Next(*a), pb = Next(*b), pc = Next(*c);
    EXPECT_EQ(pa.iteration(), it);
    EXPECT_EQ(pa.action(), v1::CONTINUE);
    EXPECT_EQ(pa.ranks_size(), 0);
    EXPECT_EQ(pa.SerializeAsString(), pb.SerializeAsString());
    EXPECT_EQ(pa.SerializeAsString(), pc.SerializeAsString());
  }
}

TEST(HostStream, StatusNumbersTheOpenTrainStreams) {
  HostWorld w(5);  // hosts: {0,1} {2,3} {4}
  auto b = w.Attach({3, 2});
  auto a = w.Attach({0, 1});
  v1::Hello single;
  single.set_job_id("job");
  single.set_rank(4);
  single.set_generation(w.generation);
  TestStream c = AttachOk(*w.job, single);
  v1::StatusResponse st;
  w.job->FillStatus(&st);
  ASSERT_EQ(st.workers_size(), 5);
  // Numbered by each stream's lowest rank, whatever the attach order: what
  // `psyncctl status` shows as "train streams 3: ranks 0,1 | ranks 2,3 | rank 4".
  for (int r = 0; r < 5; ++r) EXPECT_EQ(st.workers(r).train_stream(), r / 2 + 1) << "rank " << r;
  v1::RankClosed rc;
  rc.set_rank(3);
  rc.set_cause("stream closed (relayed)");
  ASSERT_TRUE(w.job->RankClosed(b.ref, rc).ok());
  v1::WorkersResponse ws;
  w.job->FillWorkers(&ws);
  EXPECT_EQ(ws.workers(3).train_stream(), 0) << "a rank whose stream is closed is on none";
}

TEST(HostStream, SingleReportsAndHeartbeatsNameTheirRank) {
  HostWorld w(2);
  auto a = w.Attach({0, 1});
  v1::Report r0 = Rep(0, kFull);
  r0.set_rank(0);
  v1::Report r1 = Rep(0, kFull);
  r1.set_rank(1);
  ASSERT_TRUE(w.job->Report(a.ref, r0).ok());
  EXPECT_EQ(a->size(), 0u);
  ASSERT_TRUE(w.job->Report(a.ref, r1).ok());
  EXPECT_EQ(a->size(), 1u);
  v1::Heartbeat hb;
  hb.set_rank(1);
  EXPECT_TRUE(w.job->Heartbeat(a.ref, hb).ok());
}

TEST(HostStream, HostileHellosRefusedAndNothingAttached) {
  HostWorld w(4);  // hosts: {0,1} {2,3}
  auto mb = std::make_shared<PlanQueue>();
  auto refused = [&](const v1::Hello& h, absl::StatusCode code, const std::string& text) {
    absl::Status st = w.job->Attach(h, mb).status();
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(Msg(st).find(text), std::string::npos) << st;
  };
  refused(w.HostHello({0, 7}), absl::StatusCode::kInvalidArgument, "hello.ranks names rank 7, out of range");
  refused(w.HostHello({-1}), absl::StatusCode::kInvalidArgument, "hello.ranks names rank -1");
  refused(w.HostHello({0, 1, 0}), absl::StatusCode::kInvalidArgument, "names rank 0 twice");
  refused(w.HostHello({0, 1, 2, 3, 0}), absl::StatusCode::kInvalidArgument, "lists 5 ranks but the world has 4");
  refused(w.HostHello({1, 2}), absl::StatusCode::kInvalidArgument, "hello.ranks mixes hosts");
  v1::Hello stale = w.HostHello({0, 1});
  stale.set_generation(5);
  refused(stale, absl::StatusCode::kFailedPrecondition, "hello.generation 5 is not the job's generation 1");
  v1::Hello wrong_job = w.HostHello({0, 1});
  wrong_job.set_job_id("other");
  refused(wrong_job, absl::StatusCode::kFailedPrecondition, "does not match");
  // A rank already attached on a single-rank stream cannot be carried by a host stream.
  v1::Hello single;
  single.set_job_id("job");
  single.set_rank(3);
  single.set_generation(w.generation);
  ASSERT_TRUE(w.job->Attach(single, std::make_shared<PlanQueue>()).ok());
  refused(w.HostHello({2, 3}), absl::StatusCode::kAlreadyExists, "rank 3 (h:103) already has a Train stream");
  // None of the refusals attached anything: both hosts' ranks still attach.
  auto a = w.Attach({0, 1});
  auto b = w.Attach({2});
  // ... and a second host stream for ranks already carried is refused.
  refused(w.HostHello({1}), absl::StatusCode::kAlreadyExists, "rank 1 (h:101) already has a Train stream");
  EXPECT_EQ(w.job->state(), v1::JOB_RUNNING);
}

TEST(HostStream, HelloBeforeTheWorldIsCompleteRefused) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto j = StartJoin(job, Req(0));
  v1::Hello h;
  h.set_job_id("job");
  h.set_generation(1);
  h.add_ranks(0);
  absl::Status st = job.Attach(h, std::make_shared<PlanQueue>()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(Msg(st).find("rank 0 (in hello.ranks) has not completed Join"), std::string::npos) << st;
}

TEST(HostStream, MessagesForRanksNotOnTheStreamRefused) {
  HostWorld w(4);
  auto a = w.Attach({0, 1});
  auto b = w.Attach({2, 3});
  absl::Status st = w.Batch(a, {0, 2}, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(Msg(st).find("report_batch report names rank 2, which is not one of this Train stream's ranks"),
            std::string::npos)
      << st;
  st = w.Batch(a, {0, 9}, 0);
  EXPECT_NE(Msg(st).find("names rank 9, out of range"), std::string::npos) << st;
  v1::ReportBatch empty;
  st = w.job->ReportBatch(a.ref, empty);
  EXPECT_NE(Msg(st).find("report_batch holds no report"), std::string::npos) << st;
  v1::ReportBatch big;
  for (int i = 0; i < 5; ++i) big.add_reports()->set_rank(0);
  st = w.job->ReportBatch(a.ref, big);
  EXPECT_NE(Msg(st).find("holds 5 reports but the world has 4"), std::string::npos) << st;
  v1::Heartbeat hb;
  hb.set_rank(3);
  st = w.job->Heartbeat(a.ref, hb);
  EXPECT_NE(Msg(st).find("heartbeat names rank 3, which is not one of this Train stream's ranks"),
            std::string::npos)
      << st;
  v1::Done d;
  d.set_rank(2);
  st = w.job->Done(a.ref, d);
  EXPECT_NE(Msg(st).find("done names rank 2"), std::string::npos) << st;
  v1::RankClosed rc;
  rc.set_rank(3);
  st = w.job->RankClosed(a.ref, rc);
  EXPECT_NE(Msg(st).find("rank_closed names rank 3"), std::string::npos) << st;
  // A stale generation is refused naming both.
  st = w.job->ReportBatch(StreamRef{a.ref.sink, 7, -1}, v1::ReportBatch());
  EXPECT_FALSE(st.ok());
  // The job is unharmed by all of the above (the reactor would end stream a).
  EXPECT_EQ(w.job->state(), v1::JOB_RUNNING);
  ASSERT_TRUE(w.Batch(b, {2, 3}, 0).ok());
  ASSERT_TRUE(w.Batch(a, {0, 1}, 0).ok());
  EXPECT_EQ(Next(*a).iteration(), 0);
  EXPECT_EQ(Next(*b).iteration(), 0);
}

TEST(HostStream, ClosedHostStreamLosesAllItsRanksNamingThem) {
  HostWorld w(4);
  auto a = w.Attach({0, 1});
  auto b = w.Attach({2, 3});
  ASSERT_TRUE(w.Batch(a, {0, 1}, 0).ok());
  ASSERT_TRUE(w.Batch(b, {2, 3}, 0).ok());
  Next(*a);
  Next(*b);
  w.job->StreamClosed(a.ref, "host Train stream closed");
  EXPECT_EQ(w.job->state(), v1::JOB_ABORTED);
  v1::Plan p = Next(*b);
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_EQ(p.ranks_size(), 0);
  EXPECT_NE(p.reason().find("rank 0 (h:100), rank 1 (h:101) lost: host Train stream closed"), std::string::npos)
      << p.reason();
  EXPECT_EQ(b->size(), 0u) << "one ABORT per stream";
  EXPECT_TRUE(a->closed());
  EXPECT_TRUE(b->closed());
  v1::WorkersResponse ws;
  w.job->FillWorkers(&ws);
  EXPECT_EQ(ws.workers(0).state(), v1::WORKER_LOST);
  EXPECT_EQ(ws.workers(1).state(), v1::WORKER_LOST);
}

TEST(HostStream, RankClosedLosesThatRankOnlyAndTellsItAlone) {
  HostWorld w(4);
  auto a = w.Attach({0, 1});
  auto b = w.Attach({2, 3});
  v1::RankClosed rc;
  rc.set_rank(1);
  rc.set_cause("stream closed (relayed)");
  ASSERT_TRUE(w.job->RankClosed(a.ref, rc).ok());
  EXPECT_EQ(w.job->state(), v1::JOB_ABORTED);
  v1::Plan pb = Next(*b);
  EXPECT_EQ(pb.action(), v1::ABORT);
  EXPECT_NE(pb.reason().find("rank 1 (h:101) lost: stream closed (relayed)"), std::string::npos) << pb.reason();
  EXPECT_EQ(pb.reason().find("rank 0"), std::string::npos) << pb.reason();
  // Stream a (rank 0 still on it) gets the job's ABORT once; rank 1's
  // stream had closed, so no plan names it alone.
  v1::Plan pa = Next(*a);
  EXPECT_EQ(pa.action(), v1::ABORT);
  EXPECT_EQ(pa.ranks_size(), 0);
  EXPECT_EQ(a->size(), 0u);
}

TEST(HostStream, RankBlamedByLivenessGetsAnAbortNamingItAlone) {
  HostWorld w(2);
  auto a = w.Attach({0, 1});
  v1::Report r0 = Rep(0, kFull);
  r0.set_rank(0);
  ASSERT_TRUE(w.job->Report(a.ref, r0).ok());
  v1::Heartbeat hb;
  hb.set_rank(0);
  const auto later = JobState::Clock::now() + 20s;
  ASSERT_TRUE(w.job->Heartbeat(a.ref, hb, later).ok());
  w.job->CheckLiveness(later);  // rank 1: silent beyond the heartbeat timeout
  EXPECT_EQ(w.job->state(), v1::JOB_ABORTED);
  v1::Plan own = Next(*a);
  EXPECT_EQ(own.action(), v1::ABORT);
  ASSERT_EQ(own.ranks_size(), 1);
  EXPECT_EQ(own.ranks(0), 1);
  EXPECT_NE(own.reason().find("this rank was declared lost: rank 1"), std::string::npos) << own.reason();
  v1::Plan all = Next(*a);
  EXPECT_EQ(all.action(), v1::ABORT);
  EXPECT_EQ(all.ranks_size(), 0);
}

TEST(HostStream, DoneOfOneRankKeepsTheStreamForTheOthers) {
  HostWorld w(2);
  auto a = w.Attach({0, 1});
  ASSERT_TRUE(w.Batch(a, {0, 1}, 0).ok());
  Next(*a);
  ASSERT_TRUE(w.job->Shutdown("test").stop_after_iteration() >= 0);
  ASSERT_TRUE(w.Batch(a, {0, 1}, 1).ok());
  EXPECT_EQ(Next(*a).action(), v1::STOP_AFTER);
  v1::Done d;
  d.set_rank(0);
  d.set_exit_reason("stopped");
  ASSERT_TRUE(w.job->Done(a.ref, d).ok());
  EXPECT_FALSE(a->closed()) << "rank 1 is still on it";
  d.set_rank(0);
  EXPECT_EQ(w.job->Done(a.ref, d).code(), absl::StatusCode::kFailedPrecondition);
  d.set_rank(1);
  ASSERT_TRUE(w.job->Done(a.ref, d).ok());
  EXPECT_TRUE(a->closed());
  EXPECT_EQ(w.job->state(), v1::JOB_FINISHED);
  w.job->StreamClosed(a.ref, "host Train stream closed");  // after Done: nothing lost
  EXPECT_EQ(w.job->state(), v1::JOB_FINISHED);
}

TEST(HostStream, ClosedHostStreamRestartsTheGenerationNamingItsRanks) {
  HostWorld w(4, 2, /*max_restarts=*/1);
  auto a = w.Attach({0, 1});
  auto b = w.Attach({2, 3});
  w.job->StreamClosed(b.ref, "host Train stream closed");
  EXPECT_EQ(w.job->generation(), 2);
  EXPECT_EQ(w.job->state(), v1::JOB_WAITING);
  v1::Plan p = Next(*a);
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_NE(p.reason().find("generation 1 aborted: rank 2 (h:102), rank 3 (h:103) lost: host Train stream closed"),
            std::string::npos)
      << p.reason();
  // The old stream's calls are refused naming both generations; its close is ignored.
  EXPECT_EQ(w.Batch(a, {0, 1}, 0).code(), absl::StatusCode::kFailedPrecondition);
  w.job->StreamClosed(a.ref, "host Train stream closed");  // a.ref is of generation 1
  EXPECT_EQ(w.job->state(), v1::JOB_WAITING);
}

TEST(HostStream, SingleRankStreamRefusesHostOnlyCalls) {
  HostWorld w(2);
  TestStream s = AttachOk(*w.job, OwnHello(0, w.generation));
  // The stream is rank 0's own: it may speak for rank 0 only.
  v1::Heartbeat hb;
  hb.set_rank(1);
  EXPECT_EQ(w.job->Heartbeat(s.ref, hb).code(), absl::StatusCode::kInvalidArgument);
  // ... and the host-only messages are refused on it.
  v1::ReportBatch batch;
  *batch.add_reports() = Rep(0, kFull);
  absl::Status st = w.job->ReportBatch(s.ref, batch);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(Msg(st), "report_batch is for host streams only (hello.ranks); this is the Train stream of rank 0");
  v1::RankClosed rc;
  rc.set_rank(0);
  st = w.job->RankClosed(s.ref, rc);
  EXPECT_EQ(Msg(st), "rank_closed is for host streams only (hello.ranks); this is the Train stream of rank 0");
  EXPECT_EQ(w.job->state(), v1::JOB_RUNNING);
}

}  // namespace
}  // namespace psync::server
