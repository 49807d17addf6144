// Shared by the coordinator integration tests: the in-process server (its
// options, a running one), a worker's Join request for a small fixed
// manifest, waiting for an event, and a test worker's plans.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/used_bitmap.h"
#include "server/coordinator_server.h"
#include "worker/control/coordinator_client.h"

namespace psync::test_support {

// Parameters in the test manifest ("p0".."p9", each [1] float32).
constexpr int kParams = 10;

// A coordinator for job "psync" of `world` ranks on 127.0.0.1, any free port.
inline server::ServerOptions TestServerOptions(int world, std::chrono::milliseconds report_timeout) {
  server::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.job.job_id = "psync";
  o.job.world_size = world;
  o.job.join_timeout = std::chrono::milliseconds(10000);
  o.job.report_timeout = report_timeout;
  return o;
}

// A coordinator running in this process, started from `o` (TestServerOptions
// plus the test's changes); `target` is its 127.0.0.1 address.
struct TestServer {
  explicit TestServer(const server::ServerOptions& o) {
    auto s = server::CoordinatorServer::Start(o);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return;
    srv = std::move(*s);
    target = "127.0.0.1:" + std::to_string(srv->port());
  }
  std::unique_ptr<server::CoordinatorServer> srv;
  std::string target;
};

// Polls `pred` (every 5 ms, up to 10 s): waits for an event, not a fixed time.
inline bool WaitFor(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Join as `rank` (-1 = any) with `params` parameters and tiny bucket caps.
inline control::JoinRequest TestJoinRequest(int rank, int params = kParams) {
  control::JoinRequest r;
  r.requested_rank = rank;
  r.bucket_caps = BucketCaps{8, 16};
  for (int i = 0; i < params; ++i) r.manifest.push_back({"p" + std::to_string(i), {1}, 4});
  return r;
}

// A used bitmap with every parameter of the test manifest used.
inline std::string AllUsed() { return bitmap::Pack(std::vector<uint8_t>(kParams, 1)); }

// The plan of `iteration` from the mailbox a test worker's client delivers
// into, or the ABORT plan once one arrived (the tests look at the ABORT as a
// plan); the mailbox's failure when its stream ended without one.
inline absl::StatusOr<control::IterationPlan> WaitPlan(control::PlanMailbox& plans, int64_t iteration,
                                                       std::chrono::milliseconds timeout) {
  absl::StatusOr<control::IterationPlan> p = plans.Wait(iteration, timeout);
  if (p.ok()) return p;
  if (std::optional<control::IterationPlan> abort = plans.abort_plan()) return *abort;
  return p.status();
}

}  // namespace psync::test_support
