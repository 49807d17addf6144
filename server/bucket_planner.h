// The coordinator's bucket plans (coordinator.proto BucketPlan): parameters
// packed by include/psync/common/bucket_packer.h, the packer every worker uses too, so a
// plan the coordinator announces is the one each worker would make from
// the same order and caps. Pure functions, no threads, no gRPC.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "psync/common/bucket_packer.h"
#include "psync/v1/coordinator.pb.h"

namespace psync::server {

// The BucketPlan `id` (applying from `applies_from`) of the parameters
// packed in `order` (manifest indices; `param_bytes[i]` is parameter i's size).
v1::BucketPlan PlanBuckets(int64_t id, int64_t applies_from, const std::vector<size_t>& order,
                           const std::vector<size_t>& param_bytes, const BucketCaps& caps);

// Validates rank 0's reported ready order against P parameters: every index in
// [0, P) and none repeated (ValidateParamOrder). A partial order is accepted:
// the parameters it misses (never ready in iteration 0) are appended in
// reverse manifest order. InvalidArgument names the offending position and value.
absl::StatusOr<std::vector<size_t>> CompleteReadyOrder(const std::vector<int64_t>& ready_order, size_t num_params);

}  // namespace psync::server
