// Elastic world size (JobConfig::min_world_size; coordinator.proto "Elastic
// world size"): a waiting generation starts with fewer ranks only after
// --rejoin-timeout, only at a size that splits the global batch, with its
// ranks renumbered; a rank that comes back while a smaller world runs makes
// it regroup (a stop with Plan.regroup, every rank Done, the next generation
// without a restart counted); psyncctl status says why the world has its size.
// No network, no clock: time moves only through a ManualScheduler.
#include <gtest/gtest.h>

#include "common/manual_scheduler.h"
#include "server/event_log.h"
#include "server/job_state.h"
#include "tests/unit/server/job_state_test_util.h"

namespace psync::server {
namespace {

using namespace job_state_test;

JobConfig Elastic(int world, int min_world) {
  JobConfig c = Cfg(world, 60000ms);
  c.max_restarts = 1;
  c.min_world_size = min_world;
  c.rejoin_timeout = 1000ms;
  return c;
}

v1::JoinRequest BatchReq(int rank, int64_t global_batch = 8) {
  v1::JoinRequest r = Req(rank);
  r.set_global_batch(global_batch);
  return r;
}

// Joins the full world (global batch 8), runs iteration 0, then loses
// `lost`'s stream: generation 2 waits.
std::vector<TestStream> RunThenLose(JobState& job, int world, int lost) {
  std::vector<std::shared_ptr<Joined>> js;
  for (int r = 0; r < world; ++r) js.push_back(StartJoin(job, BatchReq(r)));
  std::vector<TestStream> s;
  for (int r = 0; r < world; ++r) s.push_back(AttachOk(job, OwnHello(r, 1)));
  ReportAll(job, s, 0);
  job.StreamClosed(s[static_cast<size_t>(lost)].ref, "stream closed");
  EXPECT_EQ(job.state(), v1::JOB_WAITING);
  EXPECT_EQ(job.generation(), 2);
  return s;
}

// `ranks` Join generation 2 and its rejoin timeout passes: the smaller
// world runs; returns its streams, by new rank.
std::vector<TestStream> SmallerWorld(JobState& job, ManualScheduler& sched, const std::vector<int>& ranks) {
  std::vector<std::shared_ptr<Joined>> js;
  for (int r : ranks) js.push_back(StartJoin(job, BatchReq(r)));
  sched.RunUntil(sched.Now() + 1000ms);
  std::vector<TestStream> out;
  for (size_t i = 0; i < js.size(); ++i) {
    EXPECT_TRUE(js[i]->done && js[i]->r.ok());
    out.push_back(AttachOk(job, OwnHello(static_cast<int>(i), 2)));
  }
  return out;
}

TEST(ElasticWorld, AfterTheRejoinTimeoutTheRanksThereStartRenumbered) {
  ManualScheduler sched;
  JobState job(Elastic(4, 2), &sched);
  RunThenLose(job, 4, 0);
  // Ranks 2 and 3 come back; 0 and 1 do not.
  auto j3 = StartJoin(job, BatchReq(3));
  auto j2 = StartJoin(job, BatchReq(2));
  sched.RunUntil(sched.Now() + 999ms);
  EXPECT_FALSE(j2->done) << "the full world still has time to come back";
  EXPECT_EQ(job.state(), v1::JOB_WAITING);
  sched.RunUntil(sched.Now() + 1ms);
  ASSERT_TRUE(j2->done && j3->done);
  ASSERT_TRUE(j2->r.ok()) << j2->r.status();
  ASSERT_TRUE(j3->r.ok()) << j3->r.status();
  EXPECT_EQ(j2->r->world_size(), 2);
  EXPECT_EQ(j2->r->rank(), 0) << "ranks keep their order, renumbered 0..n-1";
  EXPECT_EQ(j3->r->rank(), 1);
  EXPECT_EQ(job.state(), v1::JOB_RUNNING);
  EXPECT_EQ(job.restarts(), 1);
  v1::StatusResponse st;
  job.FillStatus(&st);
  EXPECT_EQ(st.world_size(), 2);
  EXPECT_EQ(st.max_world_size(), 4);
  EXPECT_EQ(st.min_world_size(), 2);
  EXPECT_EQ(st.world_change_reason(), "2 of 4 ranks: ranks 0,1 did not join within --rejoin-timeout (1s)");
  ASSERT_EQ(st.workers_size(), 2);
  EXPECT_EQ(st.workers(0).pid(), 102) << "new rank 0 is the worker that asked for rank 2";
  // The smaller world trains: its plans need its two ranks only.
  TestStream a = AttachOk(job, OwnHello(0, 2)), b = AttachOk(job, OwnHello(1, 2));
  ASSERT_TRUE(job.Report(a.ref, Rep(0, kFull)).ok());
  ASSERT_TRUE(job.Report(b.ref, Rep(0, kFull)).ok());
  EXPECT_EQ(Next(*a).iteration(), 0);
}

TEST(ElasticWorld, NoSmallerWorldBelowTheMinimumOrOneThatDoesNotSplitTheBatch) {
  ManualScheduler sched;
  JobState job(Elastic(4, 3), &sched);
  RunThenLose(job, 4, 3);
  auto j0 = StartJoin(job, BatchReq(0));
  auto bad = StartJoin(job, BatchReq(1, 6));
  ASSERT_TRUE(bad->done);
  EXPECT_EQ(bad->r.status().code(), absl::StatusCode::kFailedPrecondition) << "every rank the same global batch";
  EXPECT_NE(Msg(bad->r.status()).find("global batch 6 differs"), std::string::npos) << bad->r.status();
  ASSERT_TRUE(j0->done) << "the waiting rank learns at once that the world cannot form";
  EXPECT_EQ(j0->r.status().code(), absl::StatusCode::kFailedPrecondition);
  j0 = StartJoin(job, BatchReq(0));
  auto j1 = StartJoin(job, BatchReq(1));
  sched.RunUntil(sched.Now() + 2000ms);
  EXPECT_FALSE(j0->done) << "2 ranks are under --min-world-size 3";
  v1::StatusResponse st;
  job.FillStatus(&st);
  EXPECT_EQ(st.reason(), "waiting for generation 2: 2 of 4 ranks joined, --min-world-size is 3");
  auto j2 = StartJoin(job, BatchReq(2));
  EXPECT_FALSE(j2->done) << "8 examples do not split over 3 ranks";
  job.FillStatus(&st);
  EXPECT_EQ(st.reason(),
            "waiting for generation 2: 3 of 4 ranks joined, but the global batch 8 does not split over 3 ranks");
  auto j3 = StartJoin(job, BatchReq(3));
  ASSERT_TRUE(j2->done && j3->done);
  EXPECT_EQ(j3->r->world_size(), 4) << "the full world is back";
  job.FillStatus(&st);
  EXPECT_EQ(st.world_change_reason(), "") << "nothing changed";
}

TEST(ElasticWorld, RegroupStopsEveryRankThenTheNextGenerationTakesTheNewcomer) {
  ManualScheduler sched;
  JobState job(Elastic(4, 2), &sched);
  RunThenLose(job, 4, 3);
  std::vector<TestStream> s = SmallerWorld(job, sched, {0, 1});
  TestStream a = s[0], b = s[1];
  EXPECT_EQ(job.Regroup("node 1 is back").status().code(), absl::StatusCode::kOk);
  // Rank 3 comes back: its Join waits for generation 3.
  auto back = StartJoin(job, BatchReq(3));
  EXPECT_FALSE(back->done);
  int64_t stop = -1;
  for (int64_t it = 0; it < 10 && stop < 0; ++it) {
    ASSERT_TRUE(job.Report(a.ref, Rep(it, kFull)).ok());
    ASSERT_TRUE(job.Report(b.ref, Rep(it, kFull)).ok());
    const v1::Plan p = Next(*a);
    if (p.action() == v1::STOP_AFTER) {
      EXPECT_TRUE(p.regroup()) << "the stop ends this generation only";
      EXPECT_EQ(p.reason(), "regroup: node 1 is back");
      stop = p.stop_after_iteration();
    }
  }
  ASSERT_GE(stop, 0);
  for (int64_t it = Next(*b).iteration() + 1; it <= stop; ++it) {
    ASSERT_TRUE(job.Report(a.ref, Rep(it, kFull)).ok());
    ASSERT_TRUE(job.Report(b.ref, Rep(it, kFull)).ok());
  }
  ASSERT_TRUE(job.Done(a.ref, v1::Done()).ok());
  ASSERT_TRUE(job.Done(b.ref, v1::Done()).ok());
  EXPECT_EQ(job.state(), v1::JOB_WAITING) << "not FINISHED: the job goes on";
  EXPECT_EQ(job.generation(), 3);
  EXPECT_EQ(job.restarts(), 1) << "a regroup is no restart";
  int regrouped = 0;
  for (const v1::Event& e : job.events().After(0)) {
    EXPECT_FALSE(IsFinalEvent(e)) << "a watch goes on through a regroup: " << e.message();
    regrouped += e.type() == v1::EVENT_REGROUPED;
  }
  EXPECT_EQ(regrouped, 2) << "generation 2 started smaller, then ended at the regroup";
  for (int r = 0; r < 3; ++r) StartJoin(job, BatchReq(r));
  ASSERT_TRUE(back->done);
  ASSERT_TRUE(back->r.ok()) << back->r.status();
  EXPECT_EQ(back->r->world_size(), 4);
  EXPECT_EQ(back->r->rank(), 3);
  v1::StatusResponse st;
  job.FillStatus(&st);
  EXPECT_EQ(st.world_change_reason(), "all 4 ranks again (generation 2 ran with 2)");
  EXPECT_EQ(st.last_restart_reason().rfind("generation 2 (2 ranks) stopped after iteration ", 0), 0u)
      << st.last_restart_reason();
}

TEST(ElasticWorld, RegroupIsRefusedWhenItCannotHelp) {
  ManualScheduler sched;
  JobState plain(Cfg(2), &sched);
  EXPECT_NE(Msg(plain.Regroup("x").status()).find("is not elastic"), std::string::npos);
  JobState job(Elastic(2, 1), &sched);
  EXPECT_NE(Msg(job.Regroup("x").status()).find("not running"), std::string::npos);
  StartJoin(job, BatchReq(0));
  StartJoin(job, BatchReq(1));
  EXPECT_TRUE(job.Regroup("node 1 leaves").ok()) << "a full world regroups without a node that leaves";
  auto extra = StartJoin(job, BatchReq(-1));
  EXPECT_FALSE(extra->done) << "a Join while the full world runs waits (and asks for no regroup)";
}

TEST(ElasticWorld, AShutdownDuringARegroupEndsTheJob) {
  ManualScheduler sched;
  JobState job(Elastic(2, 1), &sched);
  RunThenLose(job, 2, 1);
  TestStream a = SmallerWorld(job, sched, {0})[0];
  ASSERT_TRUE(job.Regroup("node back").ok());
  job.Shutdown("user stop");
  ASSERT_TRUE(job.Report(a.ref, Rep(0, kFull)).ok());
  const v1::Plan p = Next(*a);
  EXPECT_EQ(p.action(), v1::STOP_AFTER);
  EXPECT_FALSE(p.regroup()) << "the shutdown turned the regroup into the job's end";
  EXPECT_EQ(p.reason(), "user stop");
  for (int64_t it = 1; it <= p.stop_after_iteration(); ++it) ASSERT_TRUE(job.Report(a.ref, Rep(it, kFull)).ok());
  ASSERT_TRUE(job.Done(a.ref, v1::Done()).ok());
  EXPECT_EQ(job.state(), v1::JOB_FINISHED);
}

}  // namespace
}  // namespace psync::server
