// CudaStaging: how an ShmGroup collective reaches a CUDA tensor (several
// ranks on one GPU, or ranks on GPUs of one host without NCCL): its bytes
// go through pinned host memory on the group's own CUDA stream, ordered
// after the tensor's producer by an event, and come back the same way.
//
//   issuing thread:   Ready(t)     an event recorded on t's device's compute
//                                  stream (the bucket is complete there)
//   the group's op:   ToHost(t)    the stream waits for it, copies t into
//                                  the pinned buffer, and is waited for;
//                     (the host collective on the buffer)
//                     ToDevice(t)  copies the buffer back into t and waits
// A Work finishes after ToDevice, so whatever the compute stream queues
// after the Wait sees the result; until then the caller keeps t untouched
// (ProcessGroup's contract).
//
// Threads: Ready runs on the issuing thread; everything else runs inside
// the group's serial queue (one op at a time), which owns the stream and
// the buffer. Built without CUDA, every call fails (no CUDA tensor exists).
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "psync/tensor/tensor.h"

namespace psync::comm::shm {

class CudaStaging {
 public:
  CudaStaging() = default;
  ~CudaStaging();
  CudaStaging(const CudaStaging&) = delete;
  CudaStaging& operator=(const CudaStaging&) = delete;

  // An event recorded on t's compute stream now (destroyed with the handle).
  static absl::StatusOr<std::shared_ptr<void>> Ready(const Tensor& t);
  // The pinned buffer, at least t.nbytes() long, holding t's bytes once
  // `ready` has passed.
  absl::StatusOr<void*> ToHost(const Tensor& t, const std::shared_ptr<void>& ready);
  // Copies the buffer's first t.nbytes() bytes back into t, and waits.
  absl::Status ToDevice(const Tensor& t);

 private:
  int device_ = -1;
  void* stream_ = nullptr;  // cudaStream_t on device_
  void* host_ = nullptr;    // pinned (cudaMallocHost)
  size_t host_bytes_ = 0;
};

}  // namespace psync::comm::shm
