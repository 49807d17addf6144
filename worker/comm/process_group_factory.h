// CreateProcessGroup: one entry point for every backend.
//
//   GroupOptions opts;
//   opts.timeout = std::chrono::seconds(30);
//   opts.prefix = "run7/pg0";  // fresh per group instance
//   opts.topology = ...;       // which ranks share a host (shm, hier)
//   auto pg = CreateProcessGroup("gloo", store, rank, size, opts);
//
// "gloo": CPU tensors over TCP (GlooGroup). "nccl": CUDA tensors (NcclGroup);
// FailedPrecondition when psync was built without CUDA/NCCL or there is no
// CUDA device. "shm": CPU tensors, every rank on one host, through /dev/shm
// (ShmGroup). "hier": CPU tensors across hosts: shm within each host, Gloo
// between hosts (HierGroup). backend_choice.h picks one for "auto".
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "psync/comm/process_group.h"
#include "worker/comm/store.h"
#include "worker/comm/topology.h"

namespace psync::comm {

struct GroupOptions {
  std::chrono::milliseconds timeout{30000};  // rendezvous, per-collective and Wait default timeout
  std::string prefix;                        // fresh namespace for this group's store keys
  // gloo
  std::string hostname = "127.0.0.1";
  std::string iface;
  // nccl: CUDA device index; -1 = rank % number of visible devices
  int device = -1;
  // shm / hier: which ranks share a host. Unknown = every rank on one host
  // for "shm"; "hier" needs it.
  Topology topology;
  // shm / hier: job identity (job id + generation) in /dev/shm segment
  // names, so concurrent jobs on one host never collide.
  std::string job_tag;
  // shm / hier workspace: per rank, 2 slots of this many bytes; allreduces
  // up to shm_small_bytes take the one-step algorithm.
  size_t shm_slot_bytes = 1 << 20;
  size_t shm_small_bytes = 64 << 10;
  // shm / hier: how long a rank spins for a peer before it sleeps on a
  // futex. < 0: the env PSYNC_SHM_SPIN_US when set, else adaptive
  // (shm/spin_policy.h); >= 0: this many microseconds (0 = never spin).
  int64_t shm_spin_us = -1;
};

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateProcessGroup(const std::string& backend,
                                                                 std::shared_ptr<Store> store, int rank, int size,
                                                                 const GroupOptions& options);

// True when the "nccl" backend was compiled in (PSYNC_WITH_NCCL).
bool NcclBackendBuilt();

}  // namespace psync::comm
