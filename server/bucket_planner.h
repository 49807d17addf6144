// Bucket planning: packs parameters, in a given order, into buckets bounded by
// byte caps. Pure functions, no threads, no gRPC.
//
// Rules (same as PyTorch DDP's compute_bucket_assignment_by_size, simplified
// to one dtype):
//   - parameters keep the given order (so buckets fill in the order gradients
//     become ready in backward);
//   - bucket 0 is capped by first_cap_bytes, every later bucket by cap_bytes;
//   - a parameter is never split: one larger than the cap gets a bucket of its own;
//   - a bucket is closed when adding the next parameter would exceed its cap.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace psync::server {

struct PackedBucket {
  std::vector<int> params;  // manifest indices, in order
  int64_t bytes = 0;
};

// `order` lists manifest indices; `param_bytes[i]` is parameter i's size.
std::vector<PackedBucket> PackBuckets(const std::vector<int>& order,
                                      const std::vector<int64_t>& param_bytes,
                                      int64_t first_cap_bytes, int64_t cap_bytes);

// The initial order, before any ready order is known: reverse manifest order
// (gradients of the last layers are ready first).
std::vector<int> ReverseManifestOrder(int num_params);

// Validates rank 0's reported ready order against P parameters: every index in
// [0, P) and none repeated. A partial order is accepted: the parameters it
// misses (never ready in iteration 0) are appended in reverse manifest order.
// InvalidArgument names the offending position and value.
absl::StatusOr<std::vector<int>> CompleteReadyOrder(const std::vector<int>& ready_order,
                                                    int num_params);

}  // namespace psync::server
