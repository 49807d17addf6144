// ProcessGroup: the collectives data-parallel training needs, over a fixed
// set of ranks. Implementations: gloo/gloo_group.h (CPU tensors, TCP),
// nccl/nccl_group.h (CUDA tensors), shm/shm_group.h (CPU, one host, shared
// memory), hier/hier_group.h (CPU, shm within hosts + Gloo across).
//
// Ordering contract: collectives run in the order they are issued, and every
// rank must issue the same collectives in the same order (the reducer
// launches buckets strictly in index order for this reason).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/comm/work.h"
#include "psync/tensor/tensor.h"

namespace psync::comm {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "gloo", "shm", "hier" or "nccl" (never "auto": backend_choice.h resolves it)

  // Sums `tensor` in place across ranks, asynchronously. The caller keeps
  // `tensor` alive and untouched until the Work completes. `name` is used in
  // error messages ("bucket 3").
  virtual std::shared_ptr<Work> AllreduceSum(Tensor tensor, const std::string& name) = 0;
  // The same, then multiplied by 1/size() (the same bits as AllreduceSum
  // followed by ops::ScaleInPlace(1/size), so float32/float64 only: a
  // 16-bit tensor fails its Wait). Default: the multiplication runs on the
  // first successful Wait (ThenWork); shm fuses it into the reduction,
  // saving a pass over the tensor.
  virtual std::shared_ptr<Work> AllreduceAverage(Tensor tensor, const std::string& name);
  // Reduce-scatter of a flat buffer, in place, asynchronously: afterwards
  // this rank's shard of `tensor` (flat_shard.h: ShardOf(numel, size(),
  // rank(), element size)) holds the sum of every rank's same shard; the
  // rest of `tensor` is scratch (unspecified). Contiguous float32 (and, where
  // AllreduceSum takes them, 16-bit floats); shards may be uneven or empty.
  virtual std::shared_ptr<Work> ReduceScatterSum(Tensor tensor, const std::string& name) = 0;
  // The same, then the shard multiplied by 1/size() (the same bits as
  // ReduceScatterSum then ops::ScaleInPlace of the shard: float32/float64
  // only). Default: the multiplication runs on the first successful Wait;
  // shm fuses it into the reduction, as AllreduceAverage.
  virtual std::shared_ptr<Work> ReduceScatterAverage(Tensor tensor, const std::string& name);
  // All-gather of a flat buffer, in place, asynchronously: every rank's
  // shard of `tensor` (the same rule) is copied into that range of every
  // other rank's `tensor`; this rank's shard is only read. Any dtype (bytes
  // are moved), contiguous.
  virtual std::shared_ptr<Work> Allgather(Tensor tensor, const std::string& name) = 0;
  // Copies root's `tensor` into every rank's `tensor`, asynchronously.
  virtual std::shared_ptr<Work> Broadcast(Tensor tensor, int root, const std::string& name) = 0;
  // Ring shift, asynchronously: this rank's `send` goes to rank
  // (rank() + distance) mod size(), and `recv` receives the `send` of rank
  // (rank() - distance) mod size(). Every rank gives tensors of one byte
  // size (any dtype, contiguous, not overlapping); distance in
  // 1..size()-1. The caller keeps both alive, `send` unchanged, until the
  // Work completes. For keeping a copy of one rank's state on another (a
  // sharded optimizer's replica for live recovery). Default: one broadcast
  // from every rank in turn (every rank receives every rank's tensor, so
  // size() times the traffic; a scratch tensor of that size); gloo sends
  // point to point.
  virtual std::shared_ptr<Work> Shift(Tensor send, Tensor recv, int distance, const std::string& name);
  // Every rank contributes `bytes` (any length); returns all ranks' in rank order.
  virtual absl::StatusOr<std::vector<std::string>> AllgatherBytes(const std::string& bytes,
                                                                  std::chrono::milliseconds timeout) = 0;
  virtual absl::Status Barrier(std::chrono::milliseconds timeout) = 0;
  // Fails every pending and future collective with `reason`, and unblocks
  // peers where the backend allows. Safe from any thread.
  virtual void Abort(const absl::Status& reason) = 0;

  // A zero-filled, contiguous tensor this group's collectives handle
  // fastest. shm: it lives in shared memory every local rank has mapped, so
  // AllreduceSum reduces it in place, without staging copies. Collective:
  // every rank calls it in the same order with the same shape and dtype (the
  // reducer does, when it builds its buckets). Default: Tensor::Zeros.
  virtual absl::StatusOr<Tensor> NewCollectiveBuffer(const Shape& shape, DType dtype, Device device);
};

}  // namespace psync::comm
