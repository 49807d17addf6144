// The one bucket packer: which parameters share a flat reduction buffer.
// The coordinator packs the plans it announces with it
// (server/bucket_planner.h), every worker its own plans
// (worker/ddp/bucket_assignment.h); the two must agree bucket for bucket,
// because a worker that runs its own plan while the others run the
// coordinator's issues different collectives.
//
// Semantics: PyTorch DDP's compute_bucket_assignment_by_size. Walking the
// parameters in `order`, each is added to the open bucket of its group (a
// device: groups never share a bucket), and the bucket closes once it holds
// >= its cap: first_bucket_cap_bytes for a group's first bucket,
// bucket_cap_bytes after it. A parameter is never split, so one at or above
// the cap closes its bucket at once. Buckets are listed by the position in
// `order` of their first parameter, each bucket's parameters in `order`.
//
// Why "add, then close once reached" rather than "close before exceeding":
// it is what PyTorch does, so `--bucket-cap-mb` means the same buckets as
// there (bench/ compares the two side by side); every bucket but a group's
// last reaches its cap, so a cap never yields more (smaller) collectives
// than it must; and the workers' own packer already worked this way (the
// coordinator's closed a bucket before a parameter would exceed the cap:
// where a parameter straddled a cap, its plans differed from the workers').
//
// The order validator is shared for the same reason: a ready order the
// coordinator accepts is one every worker accepts.
//
// Pure functions, no threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace psync {

inline constexpr size_t kDefaultBucketCapBytes = size_t{25} << 20;      // PyTorch's bucket_cap_mb = 25
inline constexpr size_t kDefaultFirstBucketCapBytes = size_t{1} << 20;  // PyTorch's first bucket (1 MiB)

// The largest cap, one bucket's flat buffer (the coordinator refuses more
// in a Join: coordinator.proto "Limits").
inline constexpr size_t kMaxBucketCapBytes = size_t{16} << 30;

// The bucket caps, one spelling from psync-worker's flags to the wire:
// --bucket-cap-mb / --first-bucket-mb become these bytes once
// (FromMiB), travel as these fields through the session, the Join
// (JoinRequest.bucket_cap_bytes / first_bucket_cap_bytes), DdpOptions and
// ReducerOptions, and are checked in one place (Validate).
struct BucketCaps {
  size_t first_bucket_cap_bytes = kDefaultFirstBucketCapBytes;
  size_t bucket_cap_bytes = kDefaultBucketCapBytes;

  // From MiB (fractions allowed: 0.001 MiB is 1048 bytes), validated.
  // InvalidArgument naming `bucket_flag` / `first_flag` when a value is not
  // a positive number or is over the limit.
  static absl::StatusOr<BucketCaps> FromMiB(double bucket_cap_mb, double first_bucket_mb,
                                            const std::string& bucket_flag = "--bucket-cap-mb",
                                            const std::string& first_flag = "--first-bucket-mb");
  // Each cap in 1 byte .. kMaxBucketCapBytes; InvalidArgument naming it.
  absl::Status Validate() const;
  bool operator==(const BucketCaps& o) const {
    return first_bucket_cap_bytes == o.first_bucket_cap_bytes && bucket_cap_bytes == o.bucket_cap_bytes;
  }
};

struct PackedBucket {
  std::vector<size_t> params;  // parameter indices, in `order`
  size_t bytes = 0;
};

// Packs parameters `order` (a permutation of 0..n-1, n = param_bytes.size();
// ValidateParamOrder first) into buckets as described above. `groups[i]` is
// parameter i's group (e.g. its device); empty = one group.
std::vector<PackedBucket> PackBuckets(const std::vector<size_t>& order, const std::vector<size_t>& param_bytes,
                                      const BucketCaps& caps, const std::vector<int>& groups = {});

// n-1, n-2, ..., 0: the order before any ready order is known (the last
// layers' gradients are ready first in backward).
std::vector<size_t> ReverseOrder(size_t n);

enum class OrderRule {
  kPermutation,  // every index 0..n-1 exactly once
  kPrefix,       // indices in 0..n-1, none twice, some may be missing
};

// Checks `order` against n parameters under `rule`. InvalidArgument names
// `what` (e.g. "ready_order"), the position and the index at fault.
absl::Status ValidateParamOrder(const std::vector<int64_t>& order, size_t n, OrderRule rule,
                                const std::string& what = "parameter order");

}  // namespace psync
