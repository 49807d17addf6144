#include "server/job_state.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

namespace psync::server {
namespace {

using namespace std::chrono_literals;

v1::JoinRequest Req(int rank, int num_params = 10, const std::string& host = "h") {
  v1::JoinRequest r;
  r.set_job_id("job");
  r.set_requested_rank(rank);
  r.set_hostname(host);
  r.set_pid(100 + (rank < 0 ? 50 : rank));
  r.set_device("cpu");
  r.set_backend("gloo");
  r.set_bucket_cap_bytes(16);
  r.set_first_bucket_cap_bytes(8);
  for (int i = 0; i < num_params; ++i) {
    auto* p = r.add_manifest();
    p->set_name("p" + std::to_string(i));
    p->add_shape(1);
  }
  return r;
}

JobConfig Cfg(int world, std::chrono::milliseconds join = 5000ms, std::chrono::milliseconds report = 5000ms) {
  JobConfig c;
  c.job_id = "job";
  c.world_size = world;
  c.join_timeout = join;
  c.report_timeout = report;
  return c;
}

// Joins `world` ranks concurrently (requested ranks as given) and attaches them.
std::vector<std::shared_ptr<PlanMailbox>> JoinAll(JobState& job, const std::vector<int>& ranks,
                                                  std::vector<int>* got = nullptr) {
  std::vector<std::future<absl::StatusOr<v1::JoinResponse>>> fs;
  for (int r : ranks) fs.push_back(std::async(std::launch::async, [&job, r] { return job.Join(Req(r)); }));
  std::vector<std::shared_ptr<PlanMailbox>> mbs(ranks.size());
  for (auto& f : fs) {
    auto resp = f.get();
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) continue;
    if (got) got->push_back(resp->rank());
    v1::Hello h;
    h.set_job_id("job");
    h.set_rank(resp->rank());
    h.set_generation(resp->generation());
    auto mb = job.Attach(h);
    EXPECT_TRUE(mb.ok()) << mb.status();
    mbs[static_cast<size_t>(resp->rank())] = *mb;
  }
  return mbs;
}

v1::Report Rep(int64_t it, const std::string& bitmap) {
  v1::Report r;
  r.set_iteration(it);
  r.set_used_bitmap(bitmap);
  r.set_last_step_ms(10);
  return r;
}

bool PopNow(PlanMailbox& mb, v1::Plan* p) {
  auto f = std::async(std::launch::async, [&] { return mb.Pop(p); });
  if (f.wait_for(2s) != std::future_status::ready) return false;
  return f.get();
}

TEST(JobState, RequestedRanksHonouredAndJoinOrderFillsRest) {
  JobState job(Cfg(3));
  std::vector<int> got;
  auto f2 = std::async(std::launch::async, [&] { return job.Join(Req(2)); });
  std::this_thread::sleep_for(50ms);
  auto fa = std::async(std::launch::async, [&] { return job.Join(Req(-1)); });
  std::this_thread::sleep_for(50ms);
  auto fb = std::async(std::launch::async, [&] { return job.Join(Req(-1)); });
  auto r2 = f2.get(), ra = fa.get(), rb = fb.get();
  ASSERT_TRUE(r2.ok() && ra.ok() && rb.ok());
  EXPECT_EQ(r2->rank(), 2);
  EXPECT_EQ(ra->rank(), 0);
  EXPECT_EQ(rb->rank(), 1);
  EXPECT_EQ(r2->world_size(), 3);
  EXPECT_FALSE(r2->store_prefix().empty());
  EXPECT_EQ(r2->store_prefix(), rb->store_prefix());
  EXPECT_GT(r2->initial_bucket_plan().buckets_size(), 0);
  EXPECT_EQ(job.state(), v1::JOB_RUNNING);
}

TEST(JobState, DuplicateRankRefused) {
  JobState job(Cfg(2, 2000ms));
  auto f = std::async(std::launch::async, [&] { return job.Join(Req(1)); });
  std::this_thread::sleep_for(100ms);
  auto dup = job.Join(Req(1, 10, "other"));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(std::string(dup.status().message()).find("rank 1 is already taken"), std::string::npos);
  ASSERT_TRUE(job.Join(Req(0)).ok());
  EXPECT_TRUE(f.get().ok());
}

TEST(JobState, FullWorldRefused) {
  JobState job(Cfg(1));
  ASSERT_TRUE(job.Join(Req(-1)).ok());
  auto r = job.Join(Req(-1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(r.status().message()).find("world is full"), std::string::npos);
}

TEST(JobState, WrongJobAndMismatchesRefused) {
  JobState job(Cfg(2, 2000ms));
  auto f = std::async(std::launch::async, [&] { return job.Join(Req(0)); });
  std::this_thread::sleep_for(100ms);
  auto wrong = Req(1);
  wrong.set_job_id("other");
  EXPECT_EQ(job.Join(wrong).status().code(), absl::StatusCode::kFailedPrecondition);

  auto shape = Req(1);
  shape.mutable_manifest(3)->set_shape(0, 7);
  auto r = job.Join(shape);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(r.status().message()).find("parameter 3 is 'p3' [7]"), std::string::npos)
      << r.status();

  auto fewer = job.Join(Req(1, 9));
  EXPECT_NE(std::string(fewer.status().message()).find("lacks parameter 9 'p9'"), std::string::npos)
      << fewer.status();

  auto caps = Req(1);
  caps.set_bucket_cap_bytes(99);
  EXPECT_NE(std::string(job.Join(caps).status().message()).find("bucket caps"), std::string::npos);
  auto be = Req(1);
  be.set_backend("nccl");
  EXPECT_NE(std::string(job.Join(be).status().message()).find("backend"), std::string::npos);
  ASSERT_TRUE(job.Join(Req(1)).ok());
  EXPECT_TRUE(f.get().ok());
}

TEST(JobState, JoinTimesOutAndReleasesRank) {
  JobState job(Cfg(2, 200ms));
  auto r = job.Join(Req(0));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(std::string(r.status().message()).find("missing ranks 1"), std::string::npos) << r.status();
  v1::StatusResponse s;
  job.FillStatus(&s);
  EXPECT_EQ(s.joined(), 0);
}

TEST(JobState, AggregatesUnusedAcrossRanksAndSendsSamePlan) {
  JobState job(Cfg(2));
  auto mbs = JoinAll(job, {0, 1});
  // 10 params -> 2 bytes. rank0 uses p0..p7 except p2; rank1 uses p2 only (+p8).
  std::string a("\xFB\x00", 2), b("\x04\x01", 2);
  ASSERT_TRUE(job.Report(0, Rep(0, a)).ok());
  v1::Plan p;
  ASSERT_TRUE(job.Report(1, Rep(0, b)).ok());
  ASSERT_TRUE(PopNow(*mbs[0], &p));
  v1::Plan q;
  ASSERT_TRUE(PopNow(*mbs[1], &q));
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
  JobState job(Cfg(2));
  auto mbs = JoinAll(job, {0, 1});
  auto bad = job.Report(0, Rep(0, std::string(3, '\xff')));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.message()).find("3 bytes"), std::string::npos);
  EXPECT_NE(std::string(bad.message()).find("must be 2 bytes"), std::string::npos);
  std::string full("\xff\x03", 2);
  ASSERT_TRUE(job.Report(0, Rep(5, full)).ok());
  EXPECT_EQ(job.Report(0, Rep(5, full)).code(), absl::StatusCode::kInvalidArgument);  // twice
  EXPECT_EQ(job.Report(1, Rep(6, full)).code(), absl::StatusCode::kInvalidArgument);  // future
  EXPECT_EQ(job.Report(1, Rep(4, full)).code(), absl::StatusCode::kInvalidArgument);  // old
  EXPECT_EQ(job.Report(7, Rep(5, full)).code(), absl::StatusCode::kInvalidArgument);  // unknown rank
}

TEST(JobState, ReadyOrderProducesBucketPlanAppliedNextIteration) {
  JobState job(Cfg(2));
  auto mbs = JoinAll(job, {0, 1});
  std::string full("\xff\x03", 2);
  v1::Plan p;
  ASSERT_TRUE(job.Report(0, Rep(0, full)).ok());
  ASSERT_TRUE(job.Report(1, Rep(0, full)).ok());
  ASSERT_TRUE(PopNow(*mbs[0], &p));
  EXPECT_FALSE(p.has_bucket_plan());
  auto r = Rep(1, full);
  for (int i : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) r.add_ready_order(i);
  auto r1 = Rep(1, full);
  r1.add_ready_order(0);
  EXPECT_EQ(job.Report(1, r1).code(), absl::StatusCode::kInvalidArgument);  // only rank 0
  ASSERT_TRUE(job.Report(0, r).ok());
  ASSERT_TRUE(job.Report(1, Rep(1, full)).ok());
  ASSERT_TRUE(PopNow(*mbs[1], &p));  // iteration 0
  ASSERT_TRUE(PopNow(*mbs[1], &p));  // iteration 1
  EXPECT_EQ(p.iteration(), 1);
  ASSERT_TRUE(p.has_bucket_plan());
  EXPECT_EQ(p.bucket_plan().applies_from_iteration(), 2);
  EXPECT_EQ(p.bucket_plan().id(), 1);
  // caps: first 8 bytes (2 params), then 16 (4 params)
  ASSERT_EQ(p.bucket_plan().buckets_size(), 3);
  EXPECT_EQ(p.bucket_plan().buckets(0).param_index_size(), 2);
  EXPECT_EQ(p.bucket_plan().buckets(0).param_index(0), 0);
  v1::BucketsResponse b;
  job.FillBuckets(&b);
  EXPECT_EQ(b.plan().id(), 1);
}

TEST(JobState, ShutdownStopsEveryRankAfterSameIteration) {
  JobState job(Cfg(2));
  auto mbs = JoinAll(job, {0, 1});
  std::string full("\xff\x03", 2);
  ASSERT_TRUE(job.Report(0, Rep(0, full)).ok());
  ASSERT_TRUE(job.Report(1, Rep(0, full)).ok());
  ASSERT_TRUE(job.Report(0, Rep(1, full)).ok());  // iteration 1 half reported
  auto s = job.Shutdown("test");
  EXPECT_EQ(s.stop_after_iteration(), 1);
  EXPECT_TRUE(job.Shutdown("again").already_stopping());
  ASSERT_TRUE(job.Report(1, Rep(1, full)).ok());
  for (int r = 0; r < 2; ++r) {
    v1::Plan p;
    ASSERT_TRUE(PopNow(*mbs[r], &p));
    ASSERT_TRUE(PopNow(*mbs[r], &p));
    EXPECT_EQ(p.iteration(), 1);
    EXPECT_EQ(p.action(), v1::STOP_AFTER);
  }
  EXPECT_EQ(job.Report(0, Rep(2, full)).code(), absl::StatusCode::kFailedPrecondition);
  v1::Done d;
  d.set_exit_reason("stopped");
  ASSERT_TRUE(job.Done(0, d).ok());
  job.StreamClosed(0, "x");
  job.StreamClosed(1, "stream closed");  // disconnect after the stop plan counts as done
  EXPECT_EQ(job.state(), v1::JOB_FINISHED);
}

TEST(JobState, StreamLossAbortsOthersNamingRank) {
  JobState job(Cfg(3));
  auto mbs = JoinAll(job, {0, 1, 2});
  job.StreamClosed(1, "stream closed");
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  v1::Plan p;
  ASSERT_TRUE(PopNow(*mbs[0], &p));
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_EQ(p.reason(), "rank 1 (h:101) lost: stream closed");
  ASSERT_TRUE(PopNow(*mbs[2], &p));
  EXPECT_EQ(p.action(), v1::ABORT);
  auto again = job.Join(Req(1));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(again.status().message()).find("was aborted"), std::string::npos);
}

TEST(JobState, ReportTimeoutDeclaresRankLost) {
  // Heartbeat timeout far beyond the report timeout: this is the report rule alone.
  JobConfig cfg = Cfg(2, 5000ms, 100ms);
  cfg.heartbeat_timeout = 10000ms;
  JobState job(cfg);
  auto mbs = JoinAll(job, {0, 1});
  std::string full("\xff\x03", 2);
  ASSERT_TRUE(job.Report(0, Rep(0, full)).ok());
  job.CheckLiveness(JobState::Clock::now());
  EXPECT_EQ(job.state(), v1::JOB_RUNNING);
  job.CheckLiveness(JobState::Clock::now() + 200ms);
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  v1::Plan p;
  ASSERT_TRUE(PopNow(*mbs[0], &p));
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_NE(p.reason().find("rank 1 (h:101) lost: no report for iteration 0 within 100ms"), std::string::npos)
      << p.reason();
}

v1::Heartbeat Hb(int rank, int64_t it = 0) {
  v1::Heartbeat h;
  h.set_rank(rank);
  h.set_iteration(it);
  return h;
}

const std::string kFull("\xff\x03", 2);

// Both ranks report iteration 0 and get its plan; returns the time after.
JobState::Clock::time_point FinishIterationZero(JobState& job, std::vector<std::shared_ptr<PlanMailbox>>& mbs) {
  EXPECT_TRUE(job.Report(0, Rep(0, kFull)).ok());
  EXPECT_TRUE(job.Report(1, Rep(0, kFull)).ok());
  v1::Plan p;
  for (auto& mb : mbs) EXPECT_TRUE(PopNow(*mb, &p));
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
  JobState job(Cfg(1, 5000ms, 3000ms));
  EXPECT_EQ(job.config().heartbeat_timeout, 1500ms);
  auto resp = job.Join(Req(0));
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->heartbeat_interval_ms(), 375);
}

TEST(JobState, HeartbeatNamingAnotherRankIsAProtocolError) {
  JobState job(Cfg(2));
  auto mbs = JoinAll(job, {0, 1});
  EXPECT_TRUE(job.Heartbeat(0, Hb(0)).ok());
  auto st = job.Heartbeat(0, Hb(1));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

// The partition case: rank 1's link is cut, rank 0 blocks in the collective
// with it. Neither reports iteration 1; rank 0 keeps heartbeating, rank 1 is
// silent, and rank 1 is blamed (before the report timeout), never rank 0.
TEST(JobState, SilentRankBlamedOverBlockedHeartbeatingRank) {
  JobState job(Cfg(2, 5000ms, 3000ms));  // heartbeat timeout 1.5 s
  auto mbs = JoinAll(job, {0, 1});
  const auto t0 = FinishIterationZero(job, mbs);
  for (int i = 1; i <= 4; ++i) {
    ASSERT_TRUE(job.Heartbeat(0, Hb(0), t0 + i * 375ms).ok());
    job.CheckLiveness(t0 + i * 375ms + 10ms);
    if (i * 375 + 10 <= 1500) EXPECT_EQ(job.state(), v1::JOB_RUNNING) << i;
  }
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  EXPECT_EQ(LostReason(job, 0), "");
  EXPECT_NE(LostReason(job, 1).find("rank 1 (h:101) lost: no message"), std::string::npos) << LostReason(job, 1);
  v1::Plan p;
  ASSERT_TRUE(PopNow(*mbs[0], &p));
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_NE(p.reason().find("rank 1 (h:101) lost"), std::string::npos) << p.reason();
}

// Of two silent ranks, the one silent longest is blamed.
TEST(JobState, LongestSilentRankBlamedFirst) {
  JobState job(Cfg(3, 5000ms, 3000ms));
  auto mbs = JoinAll(job, {0, 1, 2});
  const auto t0 = JobState::Clock::now();
  ASSERT_TRUE(job.Heartbeat(0, Hb(0), t0 + 1000ms).ok());
  ASSERT_TRUE(job.Heartbeat(1, Hb(1), t0 + 500ms).ok());
  ASSERT_TRUE(job.Heartbeat(2, Hb(2), t0 + 900ms).ok());
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
  JobConfig cfg = Cfg(2, 5000ms, 3000ms);
  cfg.heartbeat_timeout = 8000ms;  // interval 1 s, quiet after 2 s
  JobState job(cfg);
  auto mbs = JoinAll(job, {0, 1});
  const auto t0 = FinishIterationZero(job, mbs);
  for (int i = 1; i <= 7; ++i) {
    ASSERT_TRUE(job.Heartbeat(0, Hb(0), t0 + i * 1000ms).ok());
    job.CheckLiveness(t0 + i * 1000ms + 100ms);  // report deadline passed from i = 3
    ASSERT_EQ(job.state(), v1::JOB_RUNNING) << "at " << i << " s";
  }
  ASSERT_TRUE(job.Heartbeat(0, Hb(0), t0 + 8000ms).ok());
  job.CheckLiveness(t0 + 8100ms);
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  EXPECT_NE(LostReason(job, 1).find("no message"), std::string::npos) << LostReason(job, 1);
  EXPECT_EQ(LostReason(job, 0), "");
}

// ... but once nobody is silent or quiet, a heartbeating rank that does not
// report is blamed after the report timeout (a hang in the rank itself).
TEST(JobState, HeartbeatingRankWithoutReportBlamedAfterReportTimeout) {
  JobState job(Cfg(2, 5000ms, 1000ms));  // heartbeat timeout 500 ms, interval 125 ms
  auto mbs = JoinAll(job, {0, 1});
  const auto t0 = FinishIterationZero(job, mbs);
  ASSERT_TRUE(job.Report(0, Rep(1, kFull)).ok());
  for (int i = 1; i <= 12; ++i) {
    const auto t = t0 + i * 100ms;
    ASSERT_TRUE(job.Heartbeat(0, Hb(0, 1), t).ok());
    ASSERT_TRUE(job.Heartbeat(1, Hb(1, 0), t).ok());
    job.CheckLiveness(t + 10ms);
    if (i <= 9) ASSERT_EQ(job.state(), v1::JOB_RUNNING) << i;
  }
  EXPECT_EQ(job.state(), v1::JOB_ABORTED);
  EXPECT_NE(LostReason(job, 1).find("no report for iteration 1 within 1s"), std::string::npos)
      << LostReason(job, 1);
  EXPECT_EQ(LostReason(job, 0), "");
}

}  // namespace
}  // namespace psync::server
