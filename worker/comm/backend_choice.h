// ChooseBackend: resolves --backend=auto|gloo|shm|nccl|hier into the process
// group to build, from where the tensors live and which ranks share a host.
// The same inputs give the same answer on every rank (the topology is the
// same everywhere), so every rank builds the same kind of group.
//
// auto, fastest correct path first:
//   CUDA tensors                      -> nccl (NCCL's own intra/inter-node hierarchy)
//   one rank                          -> gloo (nothing to reduce)
//   every rank on one host            -> shm
//   several hosts, some with >1 rank  -> hier (shm within, Gloo across)
//   one rank per host, or no host info-> gloo
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/topology.h"

namespace psync::comm {

struct BackendChoice {
  std::string backend;  // gloo | shm | nccl | hier
  std::string reason;   // one line, for the worker's start-up message
};

// InvalidArgument naming --backend when the request cannot work (unknown
// name, a CPU backend for CUDA tensors, shm across hosts, hier without host
// information).
absl::StatusOr<BackendChoice> ChooseBackend(const std::string& requested, const Topology& topology, int world_size,
                                            bool cuda);

}  // namespace psync::comm
