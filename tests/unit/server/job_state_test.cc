// JobState without a network: Joins complete through callbacks, time moves
// only through a ManualScheduler or explicit `now` arguments, so nothing
// here sleeps or races the clock.
#include "server/job_state.h"

#include <gtest/gtest.h>

#include "common/manual_scheduler.h"
#include "tests/unit/server/job_state_test_util.h"

namespace psync::server {
namespace {

using namespace std::chrono_literals;
using namespace job_state_test;

TEST(JobState, RequestedRanksHonouredAndJoinOrderFillsRest) {
  ManualScheduler sched;
  JobState job(Cfg(3), &sched);
  auto j2 = StartJoin(job, Req(2));
  auto ja = StartJoin(job, Req(-1));
  EXPECT_FALSE(j2->done);
  EXPECT_FALSE(ja->done);  // the world is not complete: nobody is answered yet
  EXPECT_NE(ja->ticket, 0u);
  auto jb = StartJoin(job, Req(-1));
  ASSERT_TRUE(j2->done && ja->done && jb->done);
  ASSERT_TRUE(j2->r.ok() && ja->r.ok() && jb->r.ok());
  EXPECT_EQ(jb->ticket, 0u);  // answered within the call
  EXPECT_EQ(j2->r->rank(), 2);
  EXPECT_EQ(ja->r->rank(), 0);
  EXPECT_EQ(jb->r->rank(), 1);
  EXPECT_EQ(j2->r->world_size(), 3);
  EXPECT_FALSE(j2->r->store_prefix().empty());
  EXPECT_EQ(j2->r->store_prefix(), jb->r->store_prefix());
  EXPECT_GT(j2->r->initial_bucket_plan().buckets_size(), 0);
  EXPECT_EQ(j2->r->plan_lookahead(), 2);
  EXPECT_EQ(job.state(), v1::JOB_RUNNING);
  EXPECT_EQ(sched.pending(), 0u) << "join deadlines are cancelled once answered";
}

TEST(JobState, HostIdsOfEveryRankDeduplicated) {
  ManualScheduler sched;
  JobState job(Cfg(4), &sched);
  std::vector<std::shared_ptr<Joined>> js;
  const char* hosts[] = {"nodeA/boot1/mnt:1", "nodeB/boot2/mnt:7", "nodeA/boot1/mnt:1", ""};
  for (int r = 0; r < 4; ++r) {
    v1::JoinRequest req = Req(r, 10, "host" + std::to_string(r));
    req.set_host_id(hosts[r]);
    js.push_back(StartJoin(job, req));
  }
  for (auto& j : js) ASSERT_TRUE(j->done && j->r.ok()) << j->r.status();
  const v1::JoinResponse& resp = *js[1]->r;
  ASSERT_EQ(resp.host_ids_size(), 3);  // the empty one falls back to the hostname
  ASSERT_EQ(resp.rank_host_index_size(), 4);
  auto host_of = [&](int r) { return resp.host_ids(resp.rank_host_index(r)); };
  EXPECT_EQ(host_of(0), "nodeA/boot1/mnt:1");
  EXPECT_EQ(host_of(1), "nodeB/boot2/mnt:7");
  EXPECT_EQ(host_of(2), "nodeA/boot1/mnt:1");
  EXPECT_EQ(host_of(3), "host3");
  for (auto& j : js) EXPECT_EQ(j->r->rank_host_index_size(), 4);
  v1::WorkersResponse w;
  job.FillWorkers(&w);
  ASSERT_EQ(w.workers_size(), 4);
  EXPECT_EQ(w.workers(1).host_id(), "nodeB/boot2/mnt:7");
}

TEST(JobState, BadHostIdRefusedNamingIt) {
  ManualScheduler sched;
  JobState job(Cfg(1), &sched);
  v1::JoinRequest req = Req(0);
  req.set_host_id("has space");
  auto j = StartJoin(job, req);
  ASSERT_TRUE(j->done);
  EXPECT_EQ(j->r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(j->r.status()).find("host_id has byte 0x20 at offset 3"), std::string::npos) << j->r.status();
  req.set_host_id(std::string(257, 'x'));
  j = StartJoin(job, req);
  EXPECT_NE(Msg(j->r.status()).find("host_id is 257 bytes; the limit is 256"), std::string::npos) << j->r.status();
}

TEST(JobState, DuplicateRankRefused) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto first = StartJoin(job, Req(1));
  auto dup = StartJoin(job, Req(1, 10, "other"));
  ASSERT_TRUE(dup->done);
  EXPECT_EQ(dup->r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(Msg(dup->r.status()).find("rank 1 is already taken by rank 1 (h:101)"), std::string::npos)
      << dup->r.status();
  EXPECT_FALSE(first->done);
  auto zero = StartJoin(job, Req(0));
  EXPECT_TRUE(zero->r.ok());
  EXPECT_TRUE(first->r.ok());
}

TEST(JobState, FullWorldRefused) {
  ManualScheduler sched;
  JobState job(Cfg(1), &sched);
  ASSERT_TRUE(StartJoin(job, Req(-1))->r.ok());
  auto r = StartJoin(job, Req(-1));
  EXPECT_EQ(r->r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(Msg(r->r.status()).find("world is full"), std::string::npos);
}

TEST(JobState, WrongJobAndMismatchesRefused) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto f = StartJoin(job, Req(0));
  auto wrong = Req(1);
  wrong.set_job_id("other");
  EXPECT_EQ(StartJoin(job, wrong)->r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(f->done) << "another job's worker says nothing about this job's";

  // Each mismatch refuses the newcomer and, at once, the rank already
  // waiting (the world cannot form); rank 0 then joins again.
  auto expect_both_refused = [&](const v1::JoinRequest& req, const std::string& text) {
    auto r = StartJoin(job, req)->r;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(Msg(r.status()).find(text), std::string::npos) << r.status();
    ASSERT_TRUE(f->done) << text;
    EXPECT_EQ(f->r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(Msg(f->r.status()).find("was refused, so the world cannot form"), std::string::npos) << f->r.status();
    EXPECT_NE(Msg(f->r.status()).find(text), std::string::npos) << f->r.status();
    f = StartJoin(job, Req(0));
    EXPECT_FALSE(f->done);
  };
  auto shape = Req(1);
  shape.mutable_manifest(3)->set_shape(0, 7);
  expect_both_refused(shape, "parameter 3 is 'p3' [7]");
  expect_both_refused(Req(1, 9), "lacks parameter 9 'p9'");
  auto caps = Req(1);
  caps.set_bucket_cap_bytes(99);
  expect_both_refused(caps, "bucket caps");
  auto be = Req(1);
  be.set_backend("nccl");
  expect_both_refused(be, "backend");
  ASSERT_TRUE(StartJoin(job, Req(1))->r.ok());
  EXPECT_TRUE(f->r.ok());
}

// The job's fingerprint (JoinRequest.settings): a rank whose settings
// differ is refused naming the setting and both values, whatever order
// either side listed them in; the waiting rank learns it at once.
TEST(JobState, DifferentSettingsRefusedNamingTheSettingAndBothValues) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto with = [](int rank, std::vector<std::pair<std::string, std::string>> settings) {
    v1::JoinRequest r = Req(rank);
    for (auto& [n, v] : settings) {
      v1::JobSetting* s = r.add_settings();
      s->set_name(n);
      s->set_value(v);
    }
    return r;
  };
  auto f = StartJoin(job, with(0, {{"--lr", "0.003"}, {"--n-head", "4"}, {"--steps", "100"}}));
  auto r = StartJoin(job, with(1, {{"--steps", "100"}, {"--n-head", "8"}, {"--lr", "0.003"}}))->r;
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(r.status()).find("--n-head is '8' on rank 1 (h:101) but '4' on rank 0 (h:100)"), std::string::npos)
      << r.status();
  EXPECT_NE(Msg(r.status()).find("pass the same --n-head to every rank"), std::string::npos) << r.status();
  ASSERT_TRUE(f->done);
  EXPECT_NE(Msg(f->r.status()).find("--n-head is '8' on rank 1"), std::string::npos) << f->r.status();

  // A setting only one side has is named too.
  f = StartJoin(job, with(0, {{"--lr", "0.003"}}));
  r = StartJoin(job, with(1, {{"--lr", "0.003"}, {"data", "tokens, 9 examples"}}))->r;
  EXPECT_NE(Msg(r.status()).find("data is 'tokens, 9 examples' on rank 1 (h:101) but not set on rank 0"),
            std::string::npos)
      << r.status();
  EXPECT_NE(Msg(r.status()).find("give every rank the same data"), std::string::npos) << r.status();

  // The same settings in another order form the world.
  f = StartJoin(job, with(0, {{"--lr", "0.003"}, {"--steps", "100"}}));
  ASSERT_TRUE(StartJoin(job, with(1, {{"--steps", "100"}, {"--lr", "0.003"}}))->r.ok());
  EXPECT_TRUE(f->r.ok()) << f->r.status();
}

TEST(JobState, RepeatedOrOversizedSettingsAreInvalid) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  v1::JoinRequest r = Req(0);
  for (int i = 0; i < 2; ++i) {
    v1::JobSetting* s = r.add_settings();
    s->set_name("--lr");
    s->set_value("1");
  }
  auto st = StartJoin(job, r)->r.status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(st).find("settings[1].name '--lr' is repeated"), std::string::npos) << st;
  v1::JoinRequest big = Req(0);
  v1::JobSetting* s = big.add_settings();
  s->set_name("x");
  s->set_value(std::string(2000, 'v'));
  st = StartJoin(job, big)->r.status();
  EXPECT_NE(Msg(st).find("settings[0].value is 2000 bytes"), std::string::npos) << st;
}

TEST(JobState, JoinTimesOutAtItsDeadlineAndReleasesRank) {
  ManualScheduler sched;
  JobState job(Cfg(2, 200ms), &sched);
  auto j = StartJoin(job, Req(0));
  sched.Advance(199ms);
  EXPECT_FALSE(j->done) << "answered before the join timeout";
  sched.Advance(1ms);
  ASSERT_TRUE(j->done);
  EXPECT_EQ(j->r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(Msg(j->r.status()).find("world incomplete after 200ms: 1 of 2 ranks joined; still missing ranks 1"),
            std::string::npos)
      << j->r.status();
  v1::StatusResponse s;
  job.FillStatus(&s);
  EXPECT_EQ(s.joined(), 0);
  // The rank is free again, and the released model no longer binds a new Join.
  auto again = StartJoin(job, Req(0, 12));
  EXPECT_FALSE(again->done);
}

TEST(JobState, CancelledJoinReleasesRank) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto j = StartJoin(job, Req(1));
  job.CancelJoin(j->ticket);
  ASSERT_TRUE(j->done);
  EXPECT_EQ(j->r.status().code(), absl::StatusCode::kCancelled);
  job.CancelJoin(j->ticket);  // twice: nothing happens
  EXPECT_EQ(sched.pending(), 0u);
  auto a = StartJoin(job, Req(1));
  auto b = StartJoin(job, Req(0));
  EXPECT_TRUE(a->r.ok() && b->r.ok());
}

TEST(JobState, ShutdownBeforeTheWorldCompletesAnswersWaitingJoins) {
  ManualScheduler sched;
  JobState job(Cfg(3), &sched);
  auto j = StartJoin(job, Req(0));
  v1::ShutdownResponse s = job.Shutdown("operator");
  EXPECT_EQ(s.stop_after_iteration(), -1);
  EXPECT_EQ(s.state(), v1::JOB_FINISHED);
  ASSERT_TRUE(j->done);
  EXPECT_EQ(j->r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(j->r.status()).find("ended during rendezvous: operator before the world was complete"),
            std::string::npos)
      << j->r.status();
}

TEST(JobState, AggregatesUnusedAcrossRanksAndSendsSamePlan) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto mbs = JoinAll(job, {0, 1});
  // 10 params -> 2 bytes. rank0 uses p0..p7 except p2; rank1 uses p2 only (+p8).
  std::string a("\xFB\x00", 2), b("\x04\x01", 2);
  ASSERT_TRUE(job.Report(mbs[0].ref, Rep(0, a)).ok());
  EXPECT_EQ(mbs[0]->size(), 0u);
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(0, b)).ok());
  v1::Plan p = Next(*mbs[0]);
  v1::Plan q = Next(*mbs[1]);
  EXPECT_EQ(p.SerializeAsString(), q.SerializeAsString());
  EXPECT_EQ(p.iteration(), 0);
  EXPECT_EQ(p.action(), v1::CONTINUE);
  // unused on every rank: p9 only
  ASSERT_EQ(p.globally_unused().size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(p.globally_unused()[0]), 0x00);
  EXPECT_EQ(static_cast<unsigned char>(p.globally_unused()[1]), 0x02);
  v1::UnusedResponse u;
  job.FillUnused(&u);
  ASSERT_EQ(u.param_names_size(), 1);
  EXPECT_EQ(u.param_names(0), "p9");
}

TEST(JobState, BadBitmapOldAndFutureIterationsRejected) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto mbs = JoinAll(job, {0, 1}, /*start=*/5);
  auto bad = job.Report(mbs[0].ref, Rep(5, std::string(3, '\xff')));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(bad),
            "report for iteration 5: used_bitmap is 3 bytes but the model has 10 parameters, so it must be 2 bytes "
            "(one bit per parameter, manifest order)");
  ASSERT_TRUE(job.Report(mbs[0].ref, Rep(5, kFull)).ok());  // the agreed start iteration (JoinRequest.start_iteration)

  auto twice = job.Report(mbs[0].ref, Rep(5, kFull));
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(twice), "rank 0 already reported iteration 5");

  auto future = job.Report(mbs[1].ref, Rep(6, kFull));
  EXPECT_EQ(future.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(future),
            "first report from rank 1 is for iteration 6 but this generation starts at iteration 5 "
            "(JoinRequest.start_iteration, the same on every rank)");

  auto old = job.Report(mbs[0].ref, Rep(4, kFull));
  EXPECT_EQ(old.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(old), "report from rank 0 for iteration 4 but its next iteration is 6 (an old iteration)");

  auto skipped = job.Report(mbs[0].ref, Rep(7, kFull));
  EXPECT_EQ(Msg(skipped),
            "report from rank 0 for iteration 7 but its next iteration is 6 (a future one: every rank reports "
            "each iteration, in order)");

  // A stream can only be rank 0's or 1's (Attach checked); one that claims
  // rank 7 is refused all the same.
  auto unknown = job.Report(StreamRef{mbs[0].plans.get(), 1, 7}, Rep(5, kFull));
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(unknown), "report names rank 7, out of range for world size 2");

  auto negative = job.Report(mbs[1].ref, Rep(-1, kFull));
  EXPECT_EQ(Msg(negative), "report iteration -1 is negative");

  // Beyond the lookahead window: rank 0 may report 6 (K = 2) but not 7.
  ASSERT_TRUE(job.Report(mbs[0].ref, Rep(6, kFull)).ok());
  auto beyond = job.Report(mbs[0].ref, Rep(7, kFull));
  EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(beyond),
            "report from rank 0 for iteration 7 is more than the plan lookahead (2) ahead of the last plan "
            "(iteration -1): wait for the plan of iteration 5 before starting iteration 7");
  EXPECT_EQ(mbs[0]->size(), 0u) << "no plan may come out of rejected reports";
  EXPECT_EQ(job.state(), v1::JOB_RUNNING);
}

TEST(JobState, RanksReportUpToLookaheadAheadAndPlansComeInOrder) {
  ManualScheduler sched;
  JobConfig cfg = Cfg(2);
  cfg.plan_lookahead = 3;
  JobState job(cfg, &sched);
  auto mbs = JoinAll(job, {0, 1});
  for (int64_t it = 0; it < 3; ++it) ASSERT_TRUE(job.Report(mbs[0].ref, Rep(it, kFull)).ok()) << it;  // 3 ahead
  EXPECT_EQ(job.Report(mbs[0].ref, Rep(3, kFull)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mbs[0]->size(), 0u);
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(0, kFull)).ok());
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(1, kFull)).ok());
  for (auto& mb : mbs) {
    ASSERT_EQ(mb->size(), 2u);
    EXPECT_EQ(Next(*mb).iteration(), 0);
    EXPECT_EQ(Next(*mb).iteration(), 1);
  }
  ASSERT_TRUE(job.Report(mbs[0].ref, Rep(3, kFull)).ok());  // the window moved
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(2, kFull)).ok());
  EXPECT_EQ(Next(*mbs[1]).iteration(), 2);
}

TEST(JobState, ReadyOrderProducesBucketPlanOnEveryRankLookaheadLater) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto mbs = JoinAll(job, {0, 1});
  ReportAll(job, mbs, 0);
  for (auto& mb : mbs) EXPECT_FALSE(Next(*mb).has_bucket_plan());
  auto r = Rep(1, kFull);
  for (int i : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) r.add_ready_order(i);
  auto r1 = Rep(1, kFull);
  r1.add_ready_order(0);
  auto not_rank0 = job.Report(mbs[1].ref, r1);
  EXPECT_EQ(not_rank0.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Msg(not_rank0), "ready_order sent by rank 1; only rank 0 sends it");
  auto bad = Rep(1, kFull);
  for (int i : {0, 1, 1}) bad.add_ready_order(i);
  auto dup = job.Report(mbs[0].ref, bad);
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(dup).find("ready_order"), std::string::npos) << dup;
  ASSERT_TRUE(job.Report(mbs[0].ref, r).ok());
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(1, kFull)).ok());
  std::string first;
  for (int rank = 0; rank < 2; ++rank) {
    v1::Plan p = Next(*mbs[rank]);
    EXPECT_EQ(p.iteration(), 1);
    ASSERT_TRUE(p.has_bucket_plan()) << "rank " << rank;
    EXPECT_EQ(p.bucket_plan().applies_from_iteration(), 3) << "iteration 1 + lookahead 2";
    EXPECT_EQ(p.bucket_plan().id(), 1);
    // caps: first 8 bytes (2 params), then 16 (4 params)
    ASSERT_EQ(p.bucket_plan().buckets_size(), 3);
    EXPECT_EQ(p.bucket_plan().buckets(0).param_index_size(), 2);
    EXPECT_EQ(p.bucket_plan().buckets(0).param_index(0), 0);
    if (rank == 0) first = p.SerializeAsString();
    EXPECT_EQ(p.SerializeAsString(), first) << "rank " << rank << " got a different plan";
  }
  v1::BucketsResponse b;
  job.FillBuckets(&b);
  EXPECT_EQ(b.plan().id(), 1);
  auto again = Rep(2, kFull);
  again.add_ready_order(0);
  EXPECT_EQ(Msg(job.Report(mbs[0].ref, again)), "ready_order was already sent once");
}

TEST(JobState, ShutdownStopsEveryRankAfterTheSameIterationLookaheadAhead) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto mbs = JoinAll(job, {0, 1});
  ReportAll(job, mbs, 0);
  ASSERT_TRUE(job.Report(mbs[0].ref, Rep(1, kFull)).ok());  // iteration 1 half reported, plan 1 unsent
  ASSERT_TRUE(job.Report(mbs[0].ref, Rep(2, kFull)).ok());  // rank 0 already runs ahead
  auto s = job.Shutdown("test");
  EXPECT_EQ(s.stop_after_iteration(), 2) << "first unsent plan 1 + K - 1";
  EXPECT_EQ(s.state(), v1::JOB_STOPPING);
  auto again = job.Shutdown("again");
  EXPECT_TRUE(again.already_stopping());
  EXPECT_EQ(again.stop_after_iteration(), 2);
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(1, kFull)).ok());
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(2, kFull)).ok());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Next(*mbs[r]).action(), v1::CONTINUE);  // plan 0, sent before the shutdown
    for (int64_t it : {1, 2}) {
      v1::Plan p = Next(*mbs[r]);
      EXPECT_EQ(p.iteration(), it);
      EXPECT_EQ(p.action(), v1::STOP_AFTER);
      EXPECT_EQ(p.stop_after_iteration(), 2);
      EXPECT_EQ(p.reason(), "test");
    }
  }
  auto late = job.Report(mbs[0].ref, Rep(3, kFull));
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Msg(late), "report for iteration 3 after the job stops after iteration 2");
  v1::Done d;
  d.set_exit_reason("stopped");
  ASSERT_TRUE(job.Done(mbs[0].ref, d).ok());
  job.StreamClosed(mbs[0].ref, "x");
  job.StreamClosed(mbs[1].ref, "stream closed");  // disconnect after the stop plan counts as done
  EXPECT_EQ(job.state(), v1::JOB_FINISHED);
}

TEST(JobState, ShutdownBeforeTheFirstReportStopsLookaheadIntoTheRun) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto mbs = JoinAll(job, {0, 1});
  EXPECT_EQ(job.Shutdown("early").stop_after_iteration(), 1);
  ReportAll(job, mbs, 0);
  ReportAll(job, mbs, 1);
  for (auto& mb : mbs) {
    for (int64_t it : {0, 1}) {
      v1::Plan p = Next(*mb);
      EXPECT_EQ(p.iteration(), it);
      EXPECT_EQ(p.action(), v1::STOP_AFTER);
      EXPECT_EQ(p.stop_after_iteration(), 1);
    }
  }
}

TEST(JobState, DoneBeforeOthersReachTheSameIterationAbortsNamingBoth) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto mbs = JoinAll(job, {0, 1});
  ReportAll(job, mbs, 0);
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(1, kFull)).ok());
  v1::Done d;
  d.set_exit_reason("completed 1 steps");
  ASSERT_TRUE(job.Done(mbs[0].ref, d).ok());
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  v1::StatusResponse s;
  job.FillStatus(&s);
  EXPECT_EQ(s.reason(),
            "rank 0 (h:100) finished after iteration 0 while rank 1 (h:101) reported iteration 1: ranks ran "
            "different numbers of steps");
}

TEST(JobState, DoneWithItsLastPlanPendingIsNotAnError) {
  // A rank that reported its last iteration and finished before the others
  // reported it (a worker that did not wait for its last plan): the others
  // still complete that iteration and the job finishes.
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto mbs = JoinAll(job, {0, 1});
  ASSERT_TRUE(job.Report(mbs[0].ref, Rep(0, kFull)).ok());
  v1::Done d;
  d.set_exit_reason("completed 1 steps");
  ASSERT_TRUE(job.Done(mbs[0].ref, d).ok());
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(0, kFull)).ok());
  EXPECT_EQ(Next(*mbs[1]).iteration(), 0);
  ASSERT_TRUE(job.Done(mbs[1].ref, d).ok());
  EXPECT_EQ(job.state(), v1::JOB_FINISHED);
}

TEST(JobState, ReportBeyondAFinishedRanksLastIterationAborts) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto mbs = JoinAll(job, {0, 1});
  ReportAll(job, mbs, 0);
  v1::Done d;
  d.set_exit_reason("completed 1 steps");
  ASSERT_TRUE(job.Done(mbs[0].ref, d).ok());
  ASSERT_TRUE(job.Report(mbs[1].ref, Rep(1, kFull)).ok());
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  v1::Plan p = Next(*mbs[1]);  // plan 0
  p = Next(*mbs[1]);
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_EQ(p.reason(),
            "rank 0 (h:100) finished after iteration 0 but rank 1 (h:101) reported iteration 1: ranks ran "
            "different numbers of steps");
}

TEST(JobState, StreamLossAbortsOthersNamingRank) {
  ManualScheduler sched;
  JobState job(Cfg(3), &sched);
  auto mbs = JoinAll(job, {0, 1, 2});
  job.StreamClosed(mbs[1].ref, "stream closed");
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  v1::Plan p = Next(*mbs[0]);
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_EQ(p.reason(), "rank 1 (h:101) lost: stream closed");
  EXPECT_EQ(Next(*mbs[2]).action(), v1::ABORT);
  EXPECT_TRUE(mbs[0]->closed());
  auto again = StartJoin(job, Req(1));
  EXPECT_EQ(again->r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(again->r.status()).find("was aborted"), std::string::npos);
}

TEST(JobState, TestOnlyPlanDelayHoldsPlansBackInOrder) {
  ManualScheduler sched;
  JobConfig cfg = Cfg(2);
  cfg.test_only_plan_delay = 50ms;
  JobState job(cfg, &sched);
  auto mbs = JoinAll(job, {0, 1});
  ReportAll(job, mbs, 0);
  sched.Advance(10ms);
  ReportAll(job, mbs, 1);  // ranks ran ahead: plan 0 is still held back
  EXPECT_EQ(mbs[0]->size(), 0u);
  v1::StatusResponse s;
  job.FillStatus(&s);
  EXPECT_EQ(s.iteration(), 1) << "both plans are made; only their delivery waits";
  sched.Advance(40ms);
  ASSERT_EQ(mbs[0]->size(), 1u);
  EXPECT_EQ(Next(*mbs[0]).iteration(), 0);
  sched.Advance(10ms);
  EXPECT_EQ(Next(*mbs[0]).iteration(), 1);
  EXPECT_EQ(mbs[1]->size(), 2u);
}

TEST(JobState, ReportTimeoutDeclaresRankLost) {
  // Heartbeat timeout far beyond the report timeout: this is the report rule alone.
  ManualScheduler sched;
  JobConfig cfg = Cfg(2, 5000ms, 100ms);
  cfg.heartbeat_timeout = 10000ms;
  JobState job(cfg, &sched);
  auto mbs = JoinAll(job, {0, 1});
  ASSERT_TRUE(job.Report(mbs[0].ref, Rep(0, kFull)).ok());
  const auto t0 = JobState::Clock::now();
  job.CheckLiveness(t0);
  EXPECT_EQ(job.state(), v1::JOB_RUNNING);
  job.CheckLiveness(t0 + 200ms);
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  v1::Plan p = Next(*mbs[0]);
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_EQ(p.reason(), "rank 1 (h:101) lost: no report for iteration 0 within 100ms (still heartbeating)");
  // The lost rank hears it too.
  v1::Plan own = Next(*mbs[1]);
  EXPECT_EQ(own.action(), v1::ABORT);
  EXPECT_NE(own.reason().find("this rank was declared lost"), std::string::npos) << own.reason();
}

v1::Heartbeat Hb(int rank, int64_t it = 0) {
  v1::Heartbeat h;
  h.set_rank(rank);
  h.set_iteration(it);
  return h;
}

// Both ranks report iteration 0 and get its plan; returns the time after.
JobState::Clock::time_point FinishIterationZero(JobState& job, std::vector<TestStream>& mbs) {
  EXPECT_TRUE(job.Report(mbs[0].ref, Rep(0, kFull)).ok());
  EXPECT_TRUE(job.Report(mbs[1].ref, Rep(0, kFull)).ok());
  for (auto& mb : mbs) EXPECT_EQ(Next(*mb).iteration(), 0);
  return JobState::Clock::now();
}

std::string LostReason(JobState& job, int rank) {
  v1::WorkersResponse w;
  job.FillWorkers(&w);
  for (const auto& x : w.workers()) {
    if (x.rank() == rank) return x.state() == v1::WORKER_LOST ? x.exit_reason() : std::string();
  }
  return "";
}

TEST(JobState, HeartbeatDefaultsAndInterval) {
  EXPECT_EQ(EffectiveHeartbeatTimeout(Cfg(2, 5000ms, 60000ms)), 5000ms);
  EXPECT_EQ(EffectiveHeartbeatTimeout(Cfg(2, 5000ms, 3000ms)), 1500ms);
  JobConfig explicit_cfg = Cfg(2, 5000ms, 3000ms);
  explicit_cfg.heartbeat_timeout = 20000ms;
  EXPECT_EQ(EffectiveHeartbeatTimeout(explicit_cfg), 20000ms);
  EXPECT_EQ(HeartbeatInterval(explicit_cfg), 1000ms);
  EXPECT_EQ(HeartbeatInterval(Cfg(2, 5000ms, 3000ms)), 375ms);
  ManualScheduler sched;
  JobState job(Cfg(1, 5000ms, 3000ms), &sched);
  EXPECT_EQ(job.config().heartbeat_timeout, 1500ms);
  auto resp = StartJoin(job, Req(0));
  ASSERT_TRUE(resp->r.ok()) << resp->r.status();
  EXPECT_EQ(resp->r->heartbeat_interval_ms(), 375);
}

TEST(JobState, HeartbeatNamingAnotherRankIsAProtocolError) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto mbs = JoinAll(job, {0, 1});
  EXPECT_TRUE(job.Heartbeat(mbs[0].ref, Hb(0)).ok());
  auto st = job.Heartbeat(mbs[0].ref, Hb(1));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(Msg(st), "heartbeat names rank 1 on the Train stream of rank 0");
}

// The partition case: rank 1's link is cut, rank 0 blocks in the collective
// with it. Neither reports iteration 1; rank 0 keeps heartbeating, rank 1 is
// silent, and rank 1 is blamed (before the report timeout), never rank 0.
TEST(JobState, SilentRankBlamedOverBlockedHeartbeatingRank) {
  ManualScheduler sched;
  JobState job(Cfg(2, 5000ms, 3000ms), &sched);  // heartbeat timeout 1.5 s
  auto mbs = JoinAll(job, {0, 1});
  const auto t0 = FinishIterationZero(job, mbs);
  for (int i = 1; i <= 4; ++i) {
    ASSERT_TRUE(job.Heartbeat(mbs[0].ref, Hb(0), t0 + i * 375ms).ok());
    job.CheckLiveness(t0 + i * 375ms + 10ms);
    if (i * 375 + 10 <= 1500) {
      EXPECT_EQ(job.state(), v1::JOB_RUNNING) << i;
    }
  }
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  EXPECT_EQ(LostReason(job, 0), "");
  EXPECT_NE(LostReason(job, 1).find("rank 1 (h:101) lost: no message"), std::string::npos) << LostReason(job, 1);
  v1::Plan p = Next(*mbs[0]);
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_NE(p.reason().find("rank 1 (h:101) lost"), std::string::npos) << p.reason();
}

// Of two silent ranks, the one silent longest is blamed.
TEST(JobState, LongestSilentRankBlamedFirst) {
  ManualScheduler sched;
  JobState job(Cfg(3, 5000ms, 3000ms), &sched);
  auto mbs = JoinAll(job, {0, 1, 2});
  const auto t0 = JobState::Clock::now();
  ASSERT_TRUE(job.Heartbeat(mbs[0].ref, Hb(0), t0 + 1000ms).ok());
  ASSERT_TRUE(job.Heartbeat(mbs[1].ref, Hb(1), t0 + 500ms).ok());
  ASSERT_TRUE(job.Heartbeat(mbs[2].ref, Hb(2), t0 + 900ms).ok());
  job.CheckLiveness(t0 + 2700ms);  // all three past 1.5 s
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  EXPECT_NE(LostReason(job, 1).find("no message"), std::string::npos);
  EXPECT_EQ(LostReason(job, 0), "");
  EXPECT_EQ(LostReason(job, 2), "");
}

// Heartbeat timeout explicitly longer than the report timeout: at the report
// deadline the blocked rank is still heartbeating but the cut rank is quiet,
// so nobody is blamed until the cut rank becomes silent.
TEST(JobState, HeartbeatKeepsRankAlivePastReportTimeoutWhileAnotherIsSilent) {
  ManualScheduler sched;
  JobConfig cfg = Cfg(2, 5000ms, 3000ms);
  cfg.heartbeat_timeout = 8000ms;  // interval 1 s, quiet after 2 s
  JobState job(cfg, &sched);
  auto mbs = JoinAll(job, {0, 1});
  const auto t0 = FinishIterationZero(job, mbs);
  for (int i = 1; i <= 7; ++i) {
    ASSERT_TRUE(job.Heartbeat(mbs[0].ref, Hb(0), t0 + i * 1000ms).ok());
    job.CheckLiveness(t0 + i * 1000ms + 100ms);  // report deadline passed from i = 3
    ASSERT_EQ(job.state(), v1::JOB_RUNNING) << "at " << i << " s";
  }
  ASSERT_TRUE(job.Heartbeat(mbs[0].ref, Hb(0), t0 + 8000ms).ok());
  job.CheckLiveness(t0 + 8100ms);
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  EXPECT_NE(LostReason(job, 1).find("no message"), std::string::npos) << LostReason(job, 1);
  EXPECT_EQ(LostReason(job, 0), "");
}

// ... but once nobody is silent or quiet, a heartbeating rank that does not
// report is blamed after the report timeout (a hang in the rank itself).
TEST(JobState, HeartbeatingRankWithoutReportBlamedAfterReportTimeout) {
  ManualScheduler sched;
  JobState job(Cfg(2, 5000ms, 1000ms), &sched);  // heartbeat timeout 500 ms, interval 125 ms
  auto mbs = JoinAll(job, {0, 1});
  const auto t0 = FinishIterationZero(job, mbs);
  ASSERT_TRUE(job.Report(mbs[0].ref, Rep(1, kFull)).ok());
  for (int i = 1; i <= 12; ++i) {
    const auto t = t0 + i * 100ms;
    ASSERT_TRUE(job.Heartbeat(mbs[0].ref, Hb(0, 1), t).ok());
    ASSERT_TRUE(job.Heartbeat(mbs[1].ref, Hb(1, 0), t).ok());
    job.CheckLiveness(t + 10ms);
    if (i <= 9) {
      ASSERT_EQ(job.state(), v1::JOB_RUNNING) << i;
    }
  }
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  EXPECT_NE(LostReason(job, 1).find("no report for iteration 1 within 1s"), std::string::npos)
      << LostReason(job, 1);
  EXPECT_EQ(LostReason(job, 0), "");
}

TEST(JobState, JoinedRankWithoutStreamLostAfterReportTimeout) {
  ManualScheduler sched;
  JobState job(Cfg(2, 5000ms, 1000ms), &sched);
  auto a = StartJoin(job, Req(0));
  auto b = StartJoin(job, Req(1));
  ASSERT_TRUE(a->r.ok() && b->r.ok());
  TestStream s0 = AttachOk(job, OwnHello(0, a->r->generation()));
  const auto t0 = JobState::Clock::now();
  ASSERT_TRUE(job.Heartbeat(s0.ref, Hb(0), t0 + 1100ms).ok());
  job.CheckLiveness(t0 + 1100ms);
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  EXPECT_EQ(LostReason(job, 1), "rank 1 (h:101) lost: no Train stream within 1s of the world completing");
}

// A paused coordinator (SIGSTOP) continued after its ranks gave up on it
// (exit 5): another rank's loss aborted the job first, and the others'
// failures or closed streams arrive after that. None of them finished.
TEST(JobState, RanksThatEndAfterAnAbortAreLostNotDone) {
  ManualScheduler sched;
  JobState job(Cfg(3), &sched);
  auto mbs = JoinAll(job, {0, 1, 2});
  ReportAll(job, mbs, 0);
  job.StreamClosed(mbs[0].ref, "stream closed");
  ASSERT_EQ(job.state(), v1::JOB_ABORTED);
  v1::Done d;
  d.set_exit_code(5);
  d.set_exit_reason("coordinator lost at iteration 1");
  ASSERT_TRUE(job.Done(mbs[1].ref, d).ok());
  job.StreamClosed(mbs[2].ref, "stream closed");
  v1::WorkersResponse w;
  job.FillWorkers(&w);
  ASSERT_EQ(w.workers_size(), 3);
  EXPECT_EQ(w.workers(1).state(), v1::WORKER_LOST);
  EXPECT_EQ(w.workers(1).exit_reason(),
            "failed (exit code 5) after the job ended: coordinator lost at iteration 1");
  EXPECT_EQ(w.workers(2).state(), v1::WORKER_LOST);
  EXPECT_EQ(w.workers(2).exit_reason(), "disconnected without Done after the job was aborted: stream closed");
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
}

}  // namespace
}  // namespace psync::server
