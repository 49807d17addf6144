#include "server/bucket_planner.h"

namespace psync::server {

v1::BucketPlan PlanBuckets(int64_t id, int64_t applies_from, const std::vector<size_t>& order,
                           const std::vector<size_t>& param_bytes, const BucketCaps& caps) {
  v1::BucketPlan plan;
  plan.set_id(id);
  plan.set_applies_from_iteration(applies_from);
  for (const PackedBucket& b : PackBuckets(order, param_bytes, caps)) {
    v1::Bucket* out = plan.add_buckets();
    for (size_t p : b.params) out->add_param_index(static_cast<int32_t>(p));
    out->set_bytes(static_cast<int64_t>(b.bytes));
  }
  return plan;
}

absl::StatusOr<std::vector<size_t>> CompleteReadyOrder(const std::vector<int64_t>& ready_order, size_t num_params) {
  absl::Status valid = ValidateParamOrder(ready_order, num_params, OrderRule::kPrefix, "ready_order");
  if (!valid.ok()) return valid;
  std::vector<bool> seen(num_params, false);
  std::vector<size_t> out;
  out.reserve(num_params);
  for (int64_t p : ready_order) {
    seen[static_cast<size_t>(p)] = true;
    out.push_back(static_cast<size_t>(p));
  }
  for (size_t p : ReverseOrder(num_params)) {
    if (!seen[p]) out.push_back(p);
  }
  return out;
}

}  // namespace psync::server
