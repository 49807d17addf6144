// CreateProcessGroup: one entry point for both backends.
//
//   GroupOptions opts;
//   opts.timeout = std::chrono::seconds(30);
//   opts.prefix = "run7/pg0";  // fresh per group instance
//   auto pg = CreateProcessGroup("gloo", store, rank, size, opts);
//
// "gloo": CPU tensors over TCP (GlooGroup). "nccl": CUDA tensors (NcclGroup);
// FailedPrecondition when psync was built without CUDA/NCCL or there is no
// CUDA device.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/process_group.h"
#include "worker/comm/store.h"

namespace psync::comm {

struct GroupOptions {
  std::chrono::milliseconds timeout{30000};  // rendezvous, per-collective and Wait default timeout
  std::string prefix;                        // fresh namespace for this group's store keys
  // gloo
  std::string hostname = "127.0.0.1";
  std::string iface;
  // nccl: CUDA device index; -1 = rank % number of visible devices
  int device = -1;
};

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateProcessGroup(const std::string& backend,
                                                                 std::shared_ptr<Store> store, int rank, int size,
                                                                 const GroupOptions& options);

// True when the "nccl" backend was compiled in (PSYNC_WITH_NCCL).
bool NcclBackendBuilt();

}  // namespace psync::comm
