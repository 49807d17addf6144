// ProcessGroup::Shift's shared parts (internal to worker/comm): the
// argument check every backend makes, and the two peers of a rank.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "psync/tensor/tensor.h"

namespace psync::comm::internal {

struct ShiftPeers {
  int to = 0;    // receives this rank's `send`
  int from = 0;  // sends what lands in this rank's `recv`
};
inline ShiftPeers PeersOf(int rank, int world, int distance) {
  return ShiftPeers{(rank + distance) % world, ((rank - distance) % world + world) % world};
}

// InvalidArgument naming `desc` unless both tensors are defined,
// contiguous, of one byte size and device, and 1 <= distance < world.
absl::Status CheckShift(const Tensor& send, const Tensor& recv, int distance, int world, const std::string& desc);

}  // namespace psync::comm::internal
