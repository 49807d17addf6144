#include "psync/common/bucket_packer.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace psync {

absl::StatusOr<BucketCaps> BucketCaps::FromMiB(double bucket_cap_mb, double first_bucket_mb,
                                               const std::string& bucket_flag, const std::string& first_flag) {
  constexpr double kMiB = 1024.0 * 1024.0;
  BucketCaps caps;
  for (auto [mb, bytes, flag] : {std::tuple<double, size_t*, const std::string*>{bucket_cap_mb, &caps.bucket_cap_bytes,
                                                                                 &bucket_flag},
                                 {first_bucket_mb, &caps.first_bucket_cap_bytes, &first_flag}}) {
    // Why the bound before the cast: a double beyond size_t's range makes
    // the conversion undefined.
    if (!(mb > 0) || !(mb * kMiB <= static_cast<double>(kMaxBucketCapBytes))) {
      return absl::InvalidArgumentError(absl::StrCat(*flag, " is ", mb, "; expected a size in MiB above 0 and at most ",
                                                      kMaxBucketCapBytes >> 20, " (16 GiB)"));
    }
    *bytes = std::max<size_t>(1, static_cast<size_t>(mb * kMiB));
  }
  return caps;
}

absl::Status BucketCaps::Validate() const {
  for (auto [bytes, name] : {std::pair<size_t, const char*>{bucket_cap_bytes, "bucket_cap_bytes"},
                             {first_bucket_cap_bytes, "first_bucket_cap_bytes"}}) {
    if (bytes == 0 || bytes > kMaxBucketCapBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket caps: ", name, " is ", bytes, "; expected 1 .. ", kMaxBucketCapBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

std::vector<PackedBucket> PackBuckets(const std::vector<size_t>& order, const std::vector<size_t>& param_bytes,
                                      const BucketCaps& caps, const std::vector<int>& groups) {
  struct Open {
    PackedBucket bucket;
    bool closed_one = false;  // has this group closed its first bucket yet?
  };
  std::map<int, Open> open;  // by group
  std::vector<PackedBucket> result;
  for (size_t p : order) {
    Open& o = open[groups.empty() ? 0 : groups[p]];
    o.bucket.params.push_back(p);
    o.bucket.bytes += param_bytes[p];
    const size_t cap = o.closed_one ? caps.bucket_cap_bytes : caps.first_bucket_cap_bytes;
    if (o.bucket.bytes >= cap) {
      result.push_back(std::move(o.bucket));
      o.bucket = PackedBucket{};
      o.closed_one = true;
    }
  }
  for (auto& [group, o] : open) {
    if (!o.bucket.params.empty()) result.push_back(std::move(o.bucket));
  }
  // Why: buckets are reduced in index order, so they are listed in the
  // order they are expected to become ready (their first parameter's).
  std::vector<size_t> position(param_bytes.size(), 0);
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::stable_sort(result.begin(), result.end(), [&](const PackedBucket& a, const PackedBucket& b) {
    return position[a.params.front()] < position[b.params.front()];
  });
  return result;
}

std::vector<size_t> ReverseOrder(size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

absl::Status ValidateParamOrder(const std::vector<int64_t>& order, size_t n, OrderRule rule,
                                const std::string& what) {
  if (order.size() > n || (rule == OrderRule::kPermutation && order.size() != n)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", order.size(), " entries for ", n, " parameters"));
  }
  std::vector<int64_t> first_at(n, -1);  // position of each index's first appearance
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const int64_t p = order[pos];
    if (p < 0 || static_cast<uint64_t>(p) >= n) {
      return absl::InvalidArgumentError(absl::StrCat(what, "[", pos, "] names index ", p, " of ", n,
                                                     "; parameter indices are 0..", static_cast<int64_t>(n) - 1));
    }
    int64_t& first = first_at[static_cast<size_t>(p)];
    if (first >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "[", pos, "] names index ", p, " twice (it repeats ", what, "[", first, "])"));
    }
    first = static_cast<int64_t>(pos);
  }
  return absl::OkStatus();
}

}  // namespace psync
