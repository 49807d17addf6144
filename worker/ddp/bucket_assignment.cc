#include "worker/ddp/bucket_assignment.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace psync::ddp {
namespace {

// Devices as map keys (Device has no ordering of its own).
std::pair<int, int> DeviceKey(const Device& d) {
  return {static_cast<int>(d.type), d.is_cpu() ? 0 : d.index};
}

}  // namespace

std::vector<size_t> ReverseOrder(size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

absl::Status ValidateOrder(const std::vector<size_t>& order, size_t n) {
  if (order.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter order has ", order.size(), " entries for ", n, " parameters"));
  }
  std::vector<bool> seen(n, false);
  for (size_t i : order) {
    if (i >= n) return absl::InvalidArgumentError(absl::StrCat("parameter order names index ", i, " of ", n));
    if (seen[i]) return absl::InvalidArgumentError(absl::StrCat("parameter order names index ", i, " twice"));
    seen[i] = true;
  }
  return absl::OkStatus();
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

BucketPlan AssignBuckets(const std::vector<size_t>& sizes_bytes, const std::vector<Device>& devices,
                         const BucketCaps& caps, const std::vector<size_t>& order) {
  struct Open {
    std::vector<size_t> params;
    size_t bytes = 0;
    bool closed_one = false;  // has this device closed its first bucket yet?
  };
  std::map<std::pair<int, int>, Open> open;
  BucketPlan result;
  for (size_t i : order) {
    Open& o = open[DeviceKey(devices[i])];
    o.params.push_back(i);
    o.bytes += sizes_bytes[i];
    const size_t cap = o.closed_one ? caps.bucket_cap_bytes : caps.first_bucket_cap_bytes;
    if (o.bytes >= cap) {
      result.push_back(std::move(o.params));
      o.params.clear();
      o.bytes = 0;
      o.closed_one = true;
    }
  }
  for (auto& [key, o] : open) {
    if (!o.params.empty()) result.push_back(std::move(o.params));
  }
  // Expected readiness order: by the position of a bucket's first parameter.
  std::vector<size_t> position(sizes_bytes.size(), 0);
  for (size_t p = 0; p < order.size(); ++p) position[order[p]] = p;
  std::stable_sort(result.begin(), result.end(), [&](const std::vector<size_t>& a, const std::vector<size_t>& b) {
    return position[a.front()] < position[b.front()];
  });
  return result;
}

std::vector<size_t> FlattenPlan(const BucketPlan& plan) {
  std::vector<size_t> out;
  for (const auto& b : plan) out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace psync::ddp
