// ShmGroup: the ProcessGroup of ranks that all share one host, through
// /dev/shm (ShmContext + collectives.h): no sockets, no kernel on the data
// path. CPU tensors, and CUDA tensors staged through pinned host memory
// (shm/cuda_staging.h): so several ranks can share one GPU, which NCCL
// refuses.
//
// Threads: callers issue collectives from any thread (issuing only
// enqueues); one communication thread (internal::SerialQueue) runs them in
// issue order. Abort may come from any thread: it poisons the queue and the
// context, so the running collective returns within ~2 ms here and peers
// waiting on us see our abort word at once.
//
// Failures (the ProcessGroup contract): a peer killed mid-collective is
// found by its pid (or heartbeat) within ~10 ms and named; a peer that stops
// issuing collectives times out after GroupOptions::timeout; either poisons
// the group. Segments are unlinked as soon as every rank mapped them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "psync/comm/process_group.h"
#include "worker/comm/serial_queue.h"
#include "worker/comm/shm/buffer_registry.h"
#include "worker/comm/shm/cuda_staging.h"
#include "worker/comm/shm/shm_context.h"
#include "worker/comm/store.h"

namespace psync::comm {

class ShmGroup : public ProcessGroup {
 public:
  // Every rank of 0..size-1 must be on this host (the caller checked the
  // topology; a peer whose segment is not visible fails the rendezvous).
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(std::shared_ptr<Store> store, int rank, int size,
                                                             shm::ShmOptions options);
  ~ShmGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "shm"; }

  std::shared_ptr<Work> AllreduceSum(Tensor tensor, const std::string& name) override;
  // The 1/size multiplication is fused into the reduction (no extra pass).
  std::shared_ptr<Work> AllreduceAverage(Tensor tensor, const std::string& name) override;
  // Reduce-scatter / all-gather: in place without staging when the tensor
  // is in a collective buffer (shm/reduce_scatter_in_place.cc,
  // allgather_in_place.cc), else through the workspace slots. The average
  // fuses the 1/size multiplication into the reduction.
  std::shared_ptr<Work> ReduceScatterSum(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> ReduceScatterAverage(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> Allgather(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> Broadcast(Tensor tensor, int root, const std::string& name) override;
  absl::StatusOr<std::vector<std::string>> AllgatherBytes(const std::string& bytes,
                                                          std::chrono::milliseconds timeout) override;
  absl::Status Barrier(std::chrono::milliseconds timeout) override;
  void Abort(const absl::Status& reason) override;
  // A buffer in shared memory (shm/buffer_registry.h): AllreduceSum on a
  // tensor that starts in one reduces it in place, without staging copies.
  absl::StatusOr<Tensor> NewCollectiveBuffer(const Shape& shape, DType dtype, Device device) override;

 private:
  ShmGroup(int rank, int size, std::shared_ptr<shm::ShmContext> ctx);
  std::shared_ptr<Work> Allreduce(Tensor tensor, const std::string& name, const char* what, float scale);
  std::shared_ptr<Work> ReduceScatter(Tensor tensor, const std::string& name, const char* what, float scale);
  // A flat collective's two algorithms (shm/collectives.h): in place on a
  // tensor in a collective buffer, and through the workspace slots.
  struct FlatAlgorithms {
    absl::Status (*in_place)(shm::ShmContext& ctx, const std::string& desc, const std::string& name,
                             const std::vector<char*>& bases, uint64_t buffer_id, size_t offset_bytes, size_t count,
                             DType type, float scale);
    absl::Status (*slots)(shm::ShmContext& ctx, const std::string& desc, const std::string& name, void* data,
                          size_t count, DType type, float scale);
  };
  // Enqueues the collective on a checked CPU tensor: in place when `buf`
  // (the collective buffer the tensor lies in) is set, else through the slots.
  std::shared_ptr<Work> EnqueueFlat(Tensor tensor, const std::string& desc, const std::string& name, float scale,
                                    std::optional<shm::BufferRegistry::View> buf, FlatAlgorithms algorithms);
  // A CUDA tensor's allreduce or broadcast (root >= 0): staged to the host.
  std::shared_ptr<Work> StagedCuda(Tensor tensor, const std::string& name, const std::string& desc, float scale,
                                   int root);
  std::string Describe(const char* what, const std::string& name, const Tensor& t) const;

  const int rank_;
  const int size_;
  std::shared_ptr<shm::ShmContext> ctx_;           // used by the communication thread only (Abort: any)
  std::shared_ptr<shm::BufferRegistry> buffers_;   // shared with the buffers' release callbacks
  std::shared_ptr<shm::CudaStaging> staging_;      // used inside queue_'s ops only
  std::shared_ptr<internal::SerialQueue> queue_;
};

}  // namespace psync::comm
