// ProcessGroup: the collectives data-parallel training needs, over a fixed
// set of ranks. Implementations: gloo/gloo_group.h (CPU tensors, TCP) and
// nccl/nccl_group.h (CUDA tensors).
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
#include "worker/comm/work.h"
#include "worker/tensor/tensor.h"

namespace psync::comm {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "gloo" or "nccl"

  // Sums `tensor` in place across ranks, asynchronously. The caller keeps
  // `tensor` alive and untouched until the Work completes. `name` is used in
  // error messages ("bucket 3").
  virtual std::shared_ptr<Work> AllreduceSum(Tensor tensor, const std::string& name) = 0;
  // Copies root's `tensor` into every rank's `tensor`, asynchronously.
  virtual std::shared_ptr<Work> Broadcast(Tensor tensor, int root, const std::string& name) = 0;
  // Every rank contributes `bytes` (any length); returns all ranks' in rank order.
  virtual absl::StatusOr<std::vector<std::string>> Allgather(const std::string& bytes,
                                                             std::chrono::milliseconds timeout) = 0;
  virtual absl::Status Barrier(std::chrono::milliseconds timeout) = 0;
  // Fails every pending and future collective with `reason`, and unblocks
  // peers where the backend allows. Safe from any thread.
  virtual void Abort(const absl::Status& reason) = 0;
};

}  // namespace psync::comm
