#include "server/bucket_planner.h"

#include "absl/strings/str_cat.h"

namespace psync::server {

std::vector<PackedBucket> PackBuckets(const std::vector<int>& order,
                                      const std::vector<int64_t>& param_bytes,
                                      int64_t first_cap_bytes, int64_t cap_bytes) {
  std::vector<PackedBucket> out;
  PackedBucket cur;
  auto cap_of_current = [&] { return out.empty() ? first_cap_bytes : cap_bytes; };
  for (int p : order) {
    const int64_t b = param_bytes[static_cast<size_t>(p)];
    if (!cur.params.empty() && cur.bytes + b > cap_of_current()) {
      out.push_back(std::move(cur));
      cur = PackedBucket{};
    }
    cur.params.push_back(p);
    cur.bytes += b;
  }
  if (!cur.params.empty()) out.push_back(std::move(cur));
  return out;
}

std::vector<int> ReverseManifestOrder(int num_params) {
  std::vector<int> order;
  order.reserve(static_cast<size_t>(num_params));
  for (int i = num_params - 1; i >= 0; --i) order.push_back(i);
  return order;
}

absl::StatusOr<std::vector<int>> CompleteReadyOrder(const std::vector<int>& ready_order,
                                                    int num_params) {
  if (ready_order.size() > static_cast<size_t>(num_params)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ready_order has ", ready_order.size(), " entries but the model has ", num_params,
        " parameters"));
  }
  std::vector<bool> seen(static_cast<size_t>(num_params), false);
  std::vector<int> out;
  out.reserve(static_cast<size_t>(num_params));
  for (size_t pos = 0; pos < ready_order.size(); ++pos) {
    const int p = ready_order[pos];
    if (p < 0 || p >= num_params) {
      return absl::InvalidArgumentError(absl::StrCat("ready_order[", pos, "] = ", p,
                                                     " is not a parameter index in [0, ",
                                                     num_params, ")"));
    }
    if (seen[static_cast<size_t>(p)]) {
      return absl::InvalidArgumentError(
          absl::StrCat("ready_order[", pos, "] = ", p, " repeats an earlier entry"));
    }
    seen[static_cast<size_t>(p)] = true;
    out.push_back(p);
  }
  for (int p = num_params - 1; p >= 0; --p) {
    if (!seen[static_cast<size_t>(p)]) out.push_back(p);
  }
  return out;
}

}  // namespace psync::server
