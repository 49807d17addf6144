#include "worker/comm/shm/cuda_staging.h"

#include "absl/strings/str_cat.h"

#if defined(PSYNC_WITH_CUDA) && __has_include("worker/tensor/cuda/cuda_context.h")
#include <cuda_runtime.h>

#include "worker/tensor/cuda/cuda_context.h"
#define PSYNC_SHM_CUDA 1
#endif

namespace psync::comm::shm {

#ifdef PSYNC_SHM_CUDA

namespace {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // not sticky: clear it for the next call on this thread
  return absl::InternalError(absl::StrCat("shm staging of a CUDA tensor: ", what, ": ", cudaGetErrorName(err), ": ",
                                          cudaGetErrorString(err)));
}

}  // namespace

CudaStaging::~CudaStaging() {
  if (stream_ != nullptr) {
    cuda::SetDevice(device_);
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
  if (host_ != nullptr) cudaFreeHost(host_);
}

absl::StatusOr<std::shared_ptr<void>> CudaStaging::Ready(const Tensor& t) {
  try {
    const int device = t.device().index;
    cuda::DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    if (absl::Status st = CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"); !st.ok()) {
      return st;
    }
    std::shared_ptr<void> handle(e, [device](void* ev) {
      cuda::SetDevice(device);
      cudaEventDestroy(static_cast<cudaEvent_t>(ev));
    });
    if (absl::Status st = CudaStatus(cudaEventRecord(e, cuda::ComputeStream(device)), "cudaEventRecord"); !st.ok()) {
      return st;
    }
    return handle;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("shm staging of a CUDA tensor: ", e.what()));
  }
}

absl::StatusOr<void*> CudaStaging::ToHost(const Tensor& t, const std::shared_ptr<void>& ready) {
  const int device = t.device().index;
  cuda::SetDevice(device);
  if (stream_ != nullptr && device != device_) {
    return absl::InvalidArgumentError(absl::StrCat("shm: a CUDA tensor on cuda:", device, " after one on cuda:",
                                                   device_, "; one group stages one device's tensors"));
  }
  if (stream_ == nullptr) {
    cudaStream_t s = nullptr;
    if (absl::Status st = CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        !st.ok()) {
      return st;
    }
    stream_ = s;
    device_ = device;
  }
  if (t.nbytes() > host_bytes_) {
    if (host_ != nullptr) cudaFreeHost(host_);
    host_ = nullptr;
    host_bytes_ = 0;
    if (absl::Status st = CudaStatus(cudaMallocHost(&host_, t.nbytes()), "cudaMallocHost"); !st.ok()) return st;
    host_bytes_ = t.nbytes();
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  absl::Status st = CudaStatus(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(ready.get()), 0), "cudaStreamWaitEvent");
  if (st.ok()) st = CudaStatus(cudaMemcpyAsync(host_, t.raw_data(), t.nbytes(), cudaMemcpyDeviceToHost, s), "copy to host");
  if (st.ok()) st = CudaStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  if (!st.ok()) return st;
  return host_;
}

absl::Status CudaStaging::ToDevice(const Tensor& t) {
  cuda::SetDevice(device_);
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  absl::Status st =
      CudaStatus(cudaMemcpyAsync(t.raw_data(), host_, t.nbytes(), cudaMemcpyHostToDevice, s), "copy to the device");
  if (st.ok()) st = CudaStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return st;
}

#else  // built without CUDA: no CUDA tensor can reach here

namespace {
absl::Status NoCuda() { return absl::FailedPreconditionError("shm: a CUDA tensor in a build without CUDA"); }
}  // namespace

CudaStaging::~CudaStaging() = default;
absl::StatusOr<std::shared_ptr<void>> CudaStaging::Ready(const Tensor&) { return NoCuda(); }
absl::StatusOr<void*> CudaStaging::ToHost(const Tensor&, const std::shared_ptr<void>&) { return NoCuda(); }
absl::Status CudaStaging::ToDevice(const Tensor&) { return NoCuda(); }

#endif

}  // namespace psync::comm::shm
