// ZeroStaging: --zero=2's gradient memory. Every bucket's buffer is a view
// of one staging buffer (the size of the largest padded bucket; the group's
// collective buffer, so shm reduce-scatters it in place), and one bucket at
// a time holds it: between steps a rank keeps only its shards
// (ZeroBuckets::shard_storage, 1/W of the gradients) plus that one buffer.
//
// Backward, on the training thread (the reducer calls in):
//   * A bucket takes the staging buffer when it is the next to launch and
//     the previous holder's reduce-scatter has completed (Acquire): the
//     holder's averaged shard is copied out to its shard storage and its
//     parameters' gradient destinations are cleared; the new holder's ready
//     gradients are copied in (zeros for parameters unused here) and its
//     other parameters' destinations point at its slots, so their producers
//     write straight into the buffer.
//   * A gradient that becomes ready while its bucket does not hold the
//     buffer stays in the parameter's own grad tensor until the bucket
//     takes it (at the latest at its launch, which then waits for the
//     previous holder's reduce-scatter).
//   * After the last bucket, Release copies the last holder's shard out.
// Buckets launch strictly in index order and only the next one to launch
// may take the buffer, so the holder is always launched or next: no wait
// can block on a bucket that cannot launch.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "worker/autograd/accumulate_grad.h"
#include "psync/autograd/variable.h"
#include "worker/ddp/bucket.h"
#include "worker/ddp/zero_buckets.h"

namespace psync::ddp {

class ZeroStaging {
 public:
  ZeroStaging(ZeroBuckets& zero, const std::vector<autograd::Variable>& params,
              const std::vector<std::shared_ptr<autograd::AccumulateGrad>>& accumulators,
              std::chrono::milliseconds timeout)
      : zero_(zero), params_(params), accumulators_(accumulators), timeout_(timeout) {}

  // A new staging buffer (the reducer rebuilt its buckets on it): nobody holds it.
  void Reset(Tensor staging);
  const Tensor& buffer() const { return staging_; }
  bool holds(size_t bucket) const { return owner_ && *owner_ == bucket; }

  // Gives `bucket` (the next to launch) the buffer. `ready[i]`: parameter i
  // is ready in this backward. With `wait`, waits for the holder's
  // reduce-scatter (bounded by the timeout); without, gives up (false) while
  // it runs. Errors: the holder's collective failed or timed out.
  absl::StatusOr<bool> Acquire(size_t bucket, std::vector<Bucket>& buckets, const std::vector<uint8_t>& ready,
                               bool wait);
  // The end of a synchronised backward (every bucket's collective done):
  // the holder's shard copied out; nobody holds the buffer.
  absl::Status Release(std::vector<Bucket>& buckets);

 private:
  // The holder's reduce-scatter finished: its shard out, its parameters off the buffer.
  absl::Status Close(Bucket& holder);

  ZeroBuckets& zero_;
  const std::vector<autograd::Variable>& params_;
  const std::vector<std::shared_ptr<autograd::AccumulateGrad>>& accumulators_;
  const std::chrono::milliseconds timeout_;
  Tensor staging_;
  std::optional<size_t> owner_;  // the bucket whose slots are valid now
};

}  // namespace psync::ddp
