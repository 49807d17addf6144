// Shared by the coordinator integration tests: the in-process server's
// options and a worker's Join request for a small fixed manifest.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "server/coordinator_server.h"
#include "worker/runtime/coordinator/coordinator_client.h"

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

// Join as `rank` (-1 = any) with `params` parameters and tiny bucket caps.
inline coordinator::JoinRequest TestJoinRequest(int rank, int params = kParams) {
  coordinator::JoinRequest r;
  r.requested_rank = rank;
  r.bucket_cap_bytes = 16;
  r.first_bucket_cap_bytes = 8;
  for (int i = 0; i < params; ++i) r.manifest.push_back({"p" + std::to_string(i), {1}, 4});
  return r;
}

// A used bitmap with every parameter of the test manifest used.
inline std::string AllUsed() { return coordinator::PackBitmap(std::vector<bool>(kParams, true)); }

}  // namespace psync::test_support
