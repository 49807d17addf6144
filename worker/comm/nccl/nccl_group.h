// NcclGroup: the CUDA ProcessGroup, over NCCL (compiled when PSYNC_WITH_NCCL).
//
// Streams (who owns what):
//  * The compute stream belongs to worker/tensor (psync::cuda::ComputeStream
//    (device)); kernels that produce and consume gradients run there, and
//    CUDA storage is allocated/freed (stream-ordered) on it.
//  * The communication stream belongs to this group (cudaStreamNonBlocking)
//    and runs only NCCL kernels.
//  * Issue: an event recorded on the compute stream is waited on by the comm
//    stream, then the collective runs on the comm stream and a completion
//    event is recorded there. The compute stream is NOT blocked at issue, so
//    backward keeps running while the collective runs.
//  * Work::Wait polls the completion event (and ncclCommGetAsyncError) from
//    the host until done or the timeout; on success it also makes the
//    compute stream wait for the completion event, so later kernels see the
//    result. A Work that is destroyed does the same before releasing its
//    tensor handle, so a stream-ordered free never races the collective.
//
// Threads: any thread may issue, wait and abort. One mutex guards the
// communicator: every NCCL call (issue, async-error query, abort, destroy)
// happens under it, so an abort never frees the communicator while another
// thread queries it.
//
// Failure model: a Wait timeout, a CUDA/NCCL error, or Abort calls
// ncclCommAbort and poisons the group; every pending and later collective
// fails with the original reason. Communicators are non-blocking
// (ncclConfig_t::blocking = 0), so init honours the timeout too.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "psync/comm/process_group.h"
#include "worker/comm/store.h"

namespace psync::comm {

struct NcclOptions {
  int device = -1;  // CUDA device index; -1 = rank % visible device count
  std::chrono::milliseconds timeout{30000};  // init (unique id exchange + comm init) and Barrier
  std::string prefix;  // fresh namespace for this group's keys in `store`
};

class NcclGroup : public ProcessGroup {
 public:
  // Rank 0 creates the ncclUniqueId and Set()s it in the store; the others
  // Get() it. FailedPrecondition("no CUDA device: ...") without a GPU.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(std::shared_ptr<Store> store, int rank, int size,
                                                             NcclOptions options = {});
  ~NcclGroup() override;
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  int device() const { return device_; }

  // `tensor` must be on this group's CUDA device.
  std::shared_ptr<Work> AllreduceSum(Tensor tensor, const std::string& name) override;
  // In place at rank x shard (NCCL's layout, which flat_shard.h's is); a
  // tensor whose length is not PaddedCount(...) goes through a padded copy.
  std::shared_ptr<Work> ReduceScatterSum(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> Allgather(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> Broadcast(Tensor tensor, int root, const std::string& name) override;
  // Small host buffers, exchanged through the store.
  absl::StatusOr<std::vector<std::string>> AllgatherBytes(const std::string& bytes,
                                                          std::chrono::milliseconds timeout) override;
  // A one-element allreduce, waited for on the host.
  absl::Status Barrier(std::chrono::milliseconds timeout) override;
  void Abort(const absl::Status& reason) override;

  absl::Status health() const;

  struct State;  // implementation detail (nccl_group.cc)

 private:
  NcclGroup(int rank, int size, int device, std::shared_ptr<State> state);
  const int rank_;
  const int size_;
  const int device_;
  std::shared_ptr<State> state_;
};

}  // namespace psync::comm
