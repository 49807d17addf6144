// ZeroParameters: --zero=3's parameter memory. Every bucket's parameters
// are views of one detached storage (psync/tensor/storage.h) in the
// bucket's padded ZeRO layout (zero_buckets.h). Between uses the storage
// has no memory: this rank keeps only its own 1/W shard of the bucket's
// values (shard(b), what the sharded optimizer updates in place).
//
// Gather(b) lends the storage a window buffer (the group's collective
// buffer, so shm gathers in place; from a pool of free buffers of the
// bucket's size), copies the shard into its place and starts the
// all-gather of the rest; Release(b) gives the buffer back to the pool. So
// the window's memory is the pool (window_bytes): per bucket size, the most
// buffers of that size lent at once. The tensors
// viewing a bucket (the parameters, and what autograd saved of them for
// backward) stay valid throughout: they read the values again once the
// bucket is gathered again, and a read while it is not throws a
// TensorError naming the bucket (never freed memory).
//
// GatherAll (the whole model readable: evaluation, --save, a new layout)
// uses buffers of its own, freed on release, so it does not count in the
// window.
//
// Threads: the training thread; the group's communication thread writes a
// window buffer only between a gather's launch and its completion.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "psync/autograd/variable.h"
#include "psync/comm/process_group.h"
#include "psync/tensor/tensor.h"
#include "worker/optim/gradient_shards.h"

namespace psync::ddp {

class ZeroParameters {
 public:
  ZeroParameters(std::shared_ptr<comm::ProcessGroup> group, std::chrono::milliseconds timeout)
      : group_(std::move(group)), timeout_(timeout) {}
  ~ZeroParameters();  // waits (bounded) for gathers in flight: they write into window buffers
  ZeroParameters(const ZeroParameters&) = delete;
  ZeroParameters& operator=(const ZeroParameters&) = delete;

  // Takes `params` over in `plan`'s layout: their values (readable now:
  // plain tensors, or a previous layout gathered whole) are cut into this
  // rank's shards, and every parameter becomes a view of its bucket's
  // storage, not gathered. Throws std::runtime_error (allocation).
  void Install(const std::vector<autograd::Variable>& params, const optim::ShardPlan& plan);
  bool installed() const { return !storages_.empty(); }
  size_t num_buckets() const { return storages_.size(); }

  // Gathered, or its gather in flight.
  bool resident(size_t b) const { return buffers_[b].defined(); }
  // Starts bucket b's all-gather unless resident; `pooled`: a window buffer
  // (else one of its own). Throws std::runtime_error (allocation).
  void Gather(size_t b, bool pooled = true);
  // Waits (bounded by the timeout) for bucket b's gather: its parameters are
  // readable. Errors: the collective's, naming the bucket.
  absl::Status Wait(size_t b);
  // Takes bucket b's buffer back (a gather in flight is waited for first:
  // the communication thread may still write it). Its error, if any.
  absl::Status Release(size_t b);
  absl::Status ReleaseAll();
  // Every bucket gathered and waited for (own buffers).
  absl::Status GatherAll();

  // Runs `fn(b)` (training thread) once bucket b's gather completed, before
  // anyone reads it (--precision=bf16's copies). fn may throw: Wait returns
  // it as a Status.
  void SetAfterGather(std::function<void(size_t)> fn) { after_gather_ = std::move(fn); }

  // This rank's shard of bucket b's values (shard(b) elements).
  const Tensor& shard(size_t b) const { return shards_[b]; }
  // Bytes this rank holds for the parameters: its shards, and the window
  // buffers (the most lent at once so far).
  int64_t shard_bytes() const;
  int64_t window_bytes() const { return peak_window_bytes_; }

 private:
  // A buffer for bucket b: the pool's (or a new one for it), or its own.
  Tensor TakeBuffer(size_t b, bool pooled);
  // The float32 elements of bucket b's buffer: its size in the pool.
  int64_t PoolKey(size_t b) const;

  const std::shared_ptr<comm::ProcessGroup> group_;
  const std::chrono::milliseconds timeout_;
  optim::ShardPlan plan_;
  std::vector<std::shared_ptr<Storage>> storages_;  // per bucket: what the parameters view
  std::vector<Tensor> views_;                       // per bucket: the whole storage, flat (padded)
  std::vector<Tensor> shards_;                      // per bucket: this rank's values
  std::vector<Tensor> buffers_;                     // per bucket: the buffer lent now (undefined: none)
  std::vector<uint8_t> pooled_;                     // per bucket: buffers_[b] is a window buffer
  std::vector<std::shared_ptr<comm::Work>> gathers_;  // per bucket: a gather not waited for yet
  std::map<int64_t, std::vector<Tensor>> free_;     // the pool's buffers not lent, by float32 elements
  int64_t pool_bytes_ = 0;                          // the pool's buffers, lent or not (this layout)
  int64_t peak_window_bytes_ = 0;                   // the largest pool, any layout
  std::function<void(size_t)> after_gather_;        // SetAfterGather
};

}  // namespace psync::ddp
