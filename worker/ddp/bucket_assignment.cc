#include "worker/ddp/bucket_assignment.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"

namespace psync::ddp {
namespace {

// Devices as map keys (Device has no ordering of its own).
std::pair<int, int> DeviceKey(const Device& d) {
  return {static_cast<int>(d.type), d.is_cpu() ? 0 : d.index};
}

}  // namespace

absl::Status ValidateOrder(const std::vector<size_t>& order, size_t n) {
  return ValidateParamOrder(std::vector<int64_t>(order.begin(), order.end()), n, OrderRule::kPermutation);
}

absl::Status ValidateBucketPlan(const BucketPlan& plan, const std::vector<Device>& devices) {
  const size_t n = devices.size();
  std::vector<bool> seen(n, false);
  size_t count = 0;
  for (size_t b = 0; b < plan.size(); ++b) {
    if (plan[b].empty()) return absl::InvalidArgumentError(absl::StrCat("bucket plan: bucket ", b, " is empty"));
    for (size_t i : plan[b]) {
      if (i >= n) {
        return absl::InvalidArgumentError(
            absl::StrCat("bucket plan: bucket ", b, " names parameter ", i, " of ", n));
      }
      if (seen[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("bucket plan: parameter ", i, " appears twice (again in bucket ", b, ")"));
      }
      if (devices[i] != devices[plan[b].front()]) {
        return absl::InvalidArgumentError(absl::StrCat("bucket plan: bucket ", b, " mixes devices ",
                                                       devices[plan[b].front()].ToString(), " and ",
                                                       devices[i].ToString()));
      }
      seen[i] = true;
      ++count;
    }
  }
  if (count != n) {
    for (size_t i = 0; i < n; ++i) {
      if (!seen[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("bucket plan covers ", count, " of ", n, " parameters; parameter ", i, " is missing"));
      }
    }
  }
  return absl::OkStatus();
}

BucketPlan AssignBucketsFor(const std::vector<autograd::Variable>& params, const BucketCaps& caps,
                            const std::vector<size_t>& order) {
  std::vector<size_t> sizes;
  std::vector<Device> devices;
  for (const auto& p : params) {
    sizes.push_back(p.data().nbytes());
    devices.push_back(p.data().device());
  }
  return AssignBuckets(sizes, devices, caps, order);
}

BucketPlan AssignBuckets(const std::vector<size_t>& sizes_bytes, const std::vector<Device>& devices,
                         const BucketCaps& caps, const std::vector<size_t>& order) {
  // Why groups: parameters of different devices never share a bucket, and
  // each device's first bucket gets the first cap.
  std::map<std::pair<int, int>, int> group_of;
  std::vector<int> groups;
  groups.reserve(devices.size());
  for (const Device& d : devices) {
    groups.push_back(group_of.emplace(DeviceKey(d), static_cast<int>(group_of.size())).first->second);
  }
  BucketPlan plan;
  for (PackedBucket& b : PackBuckets(order, sizes_bytes, caps, groups)) plan.push_back(std::move(b.params));
  return plan;
}

std::vector<size_t> FlattenPlan(const BucketPlan& plan) {
  std::vector<size_t> out;
  for (const auto& b : plan) out.insert(out.end(), b.begin(), b.end());
  return out;
}

absl::StatusOr<std::vector<size_t>> BroadcastOrder(comm::ProcessGroup& group, const std::vector<size_t>& order,
                                                   Device device, std::chrono::milliseconds timeout) {
  const size_t n = order.size();
  std::vector<size_t> out;
  try {
    std::vector<float> values(order.begin(), order.end());
    Tensor t = Tensor::FromVector(values, {static_cast<int64_t>(n)}, device);
    absl::Status st = group.Broadcast(t, 0, "bucket order")->Wait(timeout);
    if (!st.ok()) return Annotate(st, "DDP: broadcasting rank 0's bucket order");
    for (float v : t.ToVector()) out.push_back(static_cast<size_t>(v));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("DDP: broadcasting rank 0's bucket order: ", e.what()));
  }
  absl::Status st = ValidateOrder(out, n);
  if (!st.ok()) return Annotate(st, "DDP: rank 0's bucket order");
  return out;
}

}  // namespace psync::ddp
