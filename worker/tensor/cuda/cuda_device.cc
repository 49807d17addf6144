// The CUDA device runtime: device count, stream-ordered allocation, copies,
// synchronization.
#include "worker/tensor/cuda/cuda_device.h"

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cuda/cuda_context.h"
#include "psync/tensor/tensor.h"

namespace psync::cuda_device {

int DeviceCount(std::string* why) {
  // Asked once: the answer cannot change within a process, and without a
  // driver cudaGetDeviceCount returns cudaErrorInsufficientDriver (35) and
  // leaves the count untouched, so the error code decides, not the count.
  static std::once_flag once;
  static int count = 0;
  static std::string reason;
  std::call_once(once, [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();  // not sticky; clear it
      count = 0;
      reason = absl::StrCat(cudaGetErrorString(err), " (", cudaGetErrorName(err), ")");
    } else if (n == 0) {
      reason = "the CUDA driver reports no devices";
    } else {
      count = n;
    }
  });
  if (why && count == 0) *why = reason;
  return count;
}

void* Allocate(size_t nbytes, int device) {
  cudaStream_t stream = cuda::ComputeStream(device);
  cuda::DeviceGuard guard(device);
  void* ptr = nullptr;
  if (nbytes == 0) return nullptr;  // a defined, empty tensor needs no memory
  const cudaError_t err = cudaMallocAsync(&ptr, nbytes, stream);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw TensorError(absl::StrCat("cudaMallocAsync of ", nbytes, " bytes on cuda:", device,
                                   " failed: ", cudaGetErrorString(err)));
  }
  return ptr;
}

void Free(void* ptr, int device) noexcept {
  if (ptr == nullptr) return;
  try {
    // Ordered after every op already queued on the compute stream, so the
    // memory is reused only once they are done with it.
    // The storage's device must be current: a Storage may be freed on any
    // thread (whose current device is often cuda:0), and a stream-ordered
    // call with a stream of another device is not guaranteed to work.
    cudaStream_t stream = cuda::ComputeStream(device);
    cuda::DeviceGuard guard(device);
    if (cudaFreeAsync(ptr, stream) != cudaSuccess) {
      // Nothing to report from a destructor, but clear the (non-sticky)
      // error: otherwise the next kernel launch's cudaGetLastError() check
      // would throw this unrelated error.
      cudaGetLastError();
    }
  } catch (...) {
    // Destructor path (maybe at process exit after the driver shut down):
    // nothing sensible to do; the pool dies with the process.
  }
}

void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cpu()) {
    cuda::DeviceGuard guard(dst_device.index);
    // From pageable host memory this returns once the source has been staged,
    // so the caller may free or reuse its buffer immediately.
    PSYNC_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice,
                                     cuda::ComputeStream(dst_device.index)));
  } else if (dst_device.is_cpu() && src_device.is_cuda()) {
    cuda::DeviceGuard guard(src_device.index);
    cudaStream_t stream = cuda::ComputeStream(src_device.index);
    PSYNC_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream));
    PSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  } else if (dst_device == src_device) {
    cuda::DeviceGuard guard(dst_device.index);
    PSYNC_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice,
                                     cuda::ComputeStream(dst_device.index)));
  } else {
    // Between two GPUs (rare: tests, checkpoints). Each side's memory is
    // ordered on its own compute stream, so wait for the source, copy on the
    // destination stream, and wait for that too before the source may be freed.
    PSYNC_CUDA_CHECK(cudaStreamSynchronize(cuda::ComputeStream(src_device.index)));
    cudaStream_t stream = cuda::ComputeStream(dst_device.index);
    cuda::DeviceGuard guard(dst_device.index);
    PSYNC_CUDA_CHECK(
        cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, stream));
    PSYNC_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

void SetCurrentDevice(int device) {
  cuda::ComputeStream(device);  // validates the index, creates the context
  cuda::SetDevice(device);
}

void Synchronize(int device) {
  PSYNC_CUDA_CHECK(cudaStreamSynchronize(cuda::ComputeStream(device)));
}

namespace {

// The device's default memory pool (every tensor's storage), configured
// with its context.
cudaMemPool_t DefaultPool(int device) {
  cuda::ComputeStream(device);
  cudaMemPool_t pool;
  PSYNC_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}

uint64_t PoolBytes(int device, cudaMemPoolAttr attr) {
  uint64_t bytes = 0;
  PSYNC_CUDA_CHECK(cudaMemPoolGetAttribute(DefaultPool(device), attr, &bytes));
  return bytes;
}

}  // namespace

uint64_t PeakBytes(int device) { return PoolBytes(device, cudaMemPoolAttrUsedMemHigh); }

uint64_t InUseBytes(int device) { return PoolBytes(device, cudaMemPoolAttrUsedMemCurrent); }

void ResetPeakBytes(int device) {
  uint64_t zero = 0;
  PSYNC_CUDA_CHECK(cudaMemPoolSetAttribute(DefaultPool(device), cudaMemPoolAttrUsedMemHigh, &zero));
}

}  // namespace psync::cuda_device
