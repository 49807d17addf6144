// Helpers shared by the JobState unit tests (job_state_test.cc,
// job_restart_test.cc, host_stream_test.cc): Join requests, Joins answered
// through callbacks, attached streams with their plan queues, reports.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/job_state.h"
#include "server/plan_queue.h"

namespace psync::server::job_state_test {

using namespace std::chrono_literals;


inline v1::JoinRequest Req(int rank, int num_params = 10, const std::string& host = "h") {
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

inline JobConfig Cfg(int world, std::chrono::milliseconds join = 5000ms,
                     std::chrono::milliseconds report = 5000ms) {
  JobConfig c;
  c.job_id = "job";
  c.world_size = world;
  c.join_timeout = join;
  c.report_timeout = report;
  return c;
}

// The outcome of one Join, filled in by its callback.
struct Joined {
  bool done = false;
  absl::StatusOr<v1::JoinResponse> r = absl::UnknownError("not answered");
  uint64_t ticket = 0;
};

inline std::shared_ptr<Joined> StartJoin(JobState& job, const v1::JoinRequest& req) {
  auto out = std::make_shared<Joined>();
  out->ticket = job.Join(req, [out](absl::StatusOr<JoinAnswer> r) {
    EXPECT_FALSE(out->done) << "a Join callback ran twice";
    out->done = true;
    if (!r.ok()) {
      out->r = r.status();
      return;
    }
    out->r = r->Full();
    // The wire form (shared bytes + the rank's own) parses to the same response.
    v1::JoinResponse wire;
    EXPECT_TRUE(wire.ParseFromString(r->shared->bytes + r->RankBytes()));
    EXPECT_EQ(wire.SerializeAsString(), out->r->SerializeAsString());
  });
  return out;
}

// One attached Train stream of a test: the plans JobState delivered to it
// and the StreamRef that names it in JobState's calls. It reads like its
// queue: s->size(), Next(*s).
struct TestStream {
  std::shared_ptr<PlanQueue> plans;
  StreamRef ref;
  PlanQueue* operator->() const { return plans.get(); }
  PlanQueue& operator*() const { return *plans; }
};

// The hello of rank `rank`'s own Train stream.
inline v1::Hello OwnHello(int rank, int64_t generation) {
  v1::Hello h;
  h.set_job_id("job");
  h.set_rank(rank);
  h.set_generation(generation);
  return h;
}

// Attaches a stream with `hello`; EXPECTs success.
inline TestStream AttachOk(JobState& job, const v1::Hello& hello) {
  TestStream s{std::make_shared<PlanQueue>(), StreamRef{}};
  absl::StatusOr<StreamRef> ref = job.Attach(hello, s.plans);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (ref.ok()) s.ref = *ref;
  return s;
}

// Joins ranks (requested as given; the last Join completes the world) and
// attaches each one's own stream; indexed by rank.
// `start`: every rank's JoinRequest.start_iteration.
inline std::vector<TestStream> JoinAll(JobState& job, const std::vector<int>& ranks, int64_t start = 0) {
  std::vector<std::shared_ptr<Joined>> js;
  for (int r : ranks) {
    v1::JoinRequest req = Req(r);
    req.set_start_iteration(start);
    js.push_back(StartJoin(job, req));
  }
  std::vector<TestStream> streams(ranks.size());
  for (auto& j : js) {
    EXPECT_TRUE(j->done);
    EXPECT_TRUE(j->r.ok()) << j->r.status();
    if (!j->r.ok()) continue;
    streams[static_cast<size_t>(j->r->rank())] = AttachOk(job, OwnHello(j->r->rank(), j->r->generation()));
  }
  return streams;
}

inline v1::Report Rep(int64_t it, const std::string& bitmap) {
  v1::Report r;
  r.set_iteration(it);
  r.set_used_bitmap(bitmap);
  r.set_last_step_ms(10);
  return r;
}

inline const std::string kFull("\xff\x03", 2);  // 10 params, all used

// Every rank reports `it` (all used) on its stream, in rank order.
inline void ReportAll(JobState& job, const std::vector<TestStream>& streams, int64_t it) {
  for (size_t r = 0; r < streams.size(); ++r) {
    ASSERT_TRUE(job.Report(streams[r].ref, Rep(it, kFull)).ok()) << "rank " << r << " iteration " << it;
  }
}

// The next plan in the queue, which must be there already (plans are
// pushed synchronously by the call that completed them).
inline v1::Plan Next(PlanQueue& q) {
  v1::Plan p;
  EXPECT_TRUE(q.TryPop(&p)) << "no plan queued";
  return p;
}

inline std::string Msg(const absl::Status& st) { return std::string(st.message()); }

}  // namespace psync::server::job_state_test
