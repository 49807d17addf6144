// Hard limits on what the coordinator accepts (documented in
// protos/psync/v1/coordinator.proto), and the request validation that
// enforces them. No gRPC.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "psync/v1/coordinator.pb.h"

namespace psync::server {

// The transport's limit: the largest request any method takes (a Join,
// below); each method's own, smaller limit is request_limits.h's.
inline constexpr int kMaxReceiveMessageBytes = 16 << 20;
// Streams (calls) one connection may have open at once. A worker uses 3 at
// most (Train, Join, a StoreGet), psync-relay one per generation; the
// coordinator bench simulates up to 512 workers on one connection.
inline constexpr int kMaxConcurrentStreamsPerConnection = 1024;
// gRPC's own memory (transport buffers, call arenas) across every
// connection, as gRPC accounts it (reservations, not resident pages);
// above it gRPC shrinks buffers and closes idle connections, so it is a
// backstop against many connections, sized well above normal use (the
// coordinator of 4096 simulated workers peaks at ~130 MB RSS in all). At
// 256 MB a flood of 64 connections' 4 MiB read reservations reached it and
// gRPC closed a token holder's idle connection (bench/auth_flood_bench.py).
inline constexpr size_t kGrpcMemoryQuotaBytes = size_t{1} << 30;
// The most one read from a connection takes (gRPC's default is 4 MiB and
// reserves that much per connection under load); a 16 MiB Join needs 64.
inline constexpr int kMaxReadChunkBytes = 256 << 10;
inline constexpr int kMaxParams = 1 << 20;              // bitmap <= 128 KiB
inline constexpr int kMaxNameBytes = 1024;
inline constexpr int kMaxShapeRank = 16;
inline constexpr int kMaxStringBytes = 1024;            // hostname, device, reasons
inline constexpr int kMaxWorldSize = 65536;
inline constexpr int kMaxKeyBytes = 1024;
inline constexpr int kMaxValueBytes = 1 << 20;
inline constexpr int kMaxKeysPerJob = 65536;
inline constexpr int64_t kMaxStoreWaitMs = 3600 * 1000;
inline constexpr int kMaxHostIdBytes = 256;             // JoinRequest.host_id
inline constexpr int kDefaultPlanLookahead = 2;         // K (coordinator.proto, "Plan lookahead")
inline constexpr int kMaxPlanLookahead = 64;
// JoinRequest.start_iteration: far below INT64_MAX, so iteration + K never overflows.
inline constexpr int64_t kMaxIteration = int64_t{1} << 62;
// JoinRequest.checkpoint_steps: a worker lists its newest few checkpoints.
inline constexpr int kMaxCheckpointSteps = 64;
inline constexpr int kMaxRestarts = 1000000;            // --max-restarts
// JoinRequest.settings (the job's fingerprint): a few dozen flags in practice.
inline constexpr int kMaxSettings = 512;
inline constexpr int kMaxSettingNameBytes = 128;
inline constexpr int kMaxSettingValueBytes = 1024;

// Bytes of one parameter (product of dims * element size); shape already validated.
int64_t ParamBytes(const v1::ParamSpec& p);
// ceil(P / 8).

// InvalidArgument naming the field and the limit.
absl::Status ValidateJoinRequest(const v1::JoinRequest& req);
absl::Status ValidateString(const char* field, const std::string& s, int max_bytes);

}  // namespace psync::server
