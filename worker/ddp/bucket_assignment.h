// Bucket assignment: which parameters share a flat reduction buffer.
//
// A pure function of (sizes, devices, caps, order), so every rank that calls
// it with the same inputs gets the same buckets: this is what makes the
// collectives of all ranks line up. The packing itself is
// include/psync/common/bucket_packer.h (PyTorch's rule: a bucket closes once it holds >= its
// cap; a device's first bucket has the smaller first cap), the one the
// coordinator packs its announced plans with too; here devices become its
// groups.
//
//   order     the order parameters are expected to become ready in
//             backward: reverse registration order at first (the last layer's
//             gradients are computed first), later the order observed in the
//             first iteration (see Reducer).
//   caps      first_bucket_cap_bytes for the first bucket of each device and
//             bucket_cap_bytes after it (a small first bucket starts the
//             first collective early). A single parameter larger than the cap
//             gets a bucket of its own; buckets never split a parameter.
//
// Buckets hold parameters of one device each. The result lists buckets in
// the order they are expected to become ready (by the position in `order` of
// their first parameter), and each bucket's parameters in `order`.
#pragma once

#include <cstddef>
#include <vector>

#include <chrono>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/autograd/variable.h"
#include "psync/comm/process_group.h"
#include "psync/common/bucket_packer.h"
#include "psync/tensor/device.h"

namespace psync::ddp {

using BucketPlan = std::vector<std::vector<size_t>>;  // bucket -> parameter indices

inline constexpr size_t kMiB = size_t{1} << 20;
// The caps and their defaults (25 MiB, first 1 MiB) and ReverseOrder (n-1, ..., 0) are include/psync/common/bucket_packer.h's.
using psync::BucketCaps;
using psync::kDefaultBucketCapBytes;
using psync::kDefaultFirstBucketCapBytes;
using psync::ReverseOrder;

// Checks that `order` is a permutation of 0..n-1 (names the first problem;
// psync::ValidateParamOrder).
absl::Status ValidateOrder(const std::vector<size_t>& order, size_t n);

// Checks that `plan` uses every parameter exactly once, has no empty
// bucket, and keeps each bucket on one device.
absl::Status ValidateBucketPlan(const BucketPlan& plan, const std::vector<Device>& devices);

// Packs parameters (sizes in bytes, one device each) into buckets, walking
// them in `order` (a permutation of 0..n-1; ValidateOrder first).
BucketPlan AssignBuckets(const std::vector<size_t>& sizes_bytes, const std::vector<Device>& devices,
                         const BucketCaps& caps, const std::vector<size_t>& order);

// AssignBuckets over `params` (their sizes and devices).
BucketPlan AssignBucketsFor(const std::vector<autograd::Variable>& params, const BucketCaps& caps,
                            const std::vector<size_t>& order);

// The parameters of `plan`, bucket after bucket: the order AssignBuckets
// would need to reproduce it (with the same caps).
std::vector<size_t> FlattenPlan(const BucketPlan& plan);

// Rank 0's `order` (a permutation of 0..n-1, n = order.size()) on every
// rank: a broadcast over `group` (indices as floats: exact below 2^24),
// validated. Collective; the reducer's RebuildMode::kBroadcastFromRank0.
absl::StatusOr<std::vector<size_t>> BroadcastOrder(comm::ProcessGroup& group, const std::vector<size_t>& order,
                                                   Device device, std::chrono::milliseconds timeout);

}  // namespace psync::ddp
