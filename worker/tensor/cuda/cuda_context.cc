#include "worker/tensor/cuda/cuda_context.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cuda/cuda_device.h"
#include "worker/tensor/tensor.h"

namespace psync::cuda {

void CheckCuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  // Clear the (non-sticky) error so the next unrelated call does not see it.
  cudaGetLastError();
  throw TensorError(absl::StrCat(call, " failed at ", file, ":", line, ": ", cudaGetErrorName(err),
                                 ": ", cudaGetErrorString(err)));
}

void CheckCublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw TensorError(absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                 cublasGetStatusName(status), ": ", cublasGetStatusString(status)));
}

DeviceGuard::DeviceGuard(int device) {
  PSYNC_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) PSYNC_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

namespace {

struct DeviceContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
};

// Contexts are created once per device and intentionally never destroyed:
// Storage destructors can run during static destruction and still need the
// stream, and tearing CUDA objects down after the driver unloads crashes.
std::mutex g_mu;
std::vector<std::unique_ptr<DeviceContext>>* g_contexts = new std::vector<std::unique_ptr<DeviceContext>>();

DeviceContext& Context(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (device < 0) throw TensorError(absl::StrCat("invalid CUDA device index ", device));
  if (static_cast<size_t>(device) >= g_contexts->size()) g_contexts->resize(device + 1);
  auto& slot = (*g_contexts)[device];
  if (slot) return *slot;

  std::string why;
  const int count = cuda_device::DeviceCount(&why);
  if (count == 0) throw TensorError(absl::StrCat("cuda:", device, ": no CUDA device: ", why));
  if (device >= count) {
    throw TensorError(absl::StrCat("cuda:", device, " requested but only ", count,
                                   " CUDA device(s) are visible"));
  }
  DeviceGuard guard(device);
  auto ctx = std::make_unique<DeviceContext>();
  // Non-blocking: the compute stream does not serialize with the legacy
  // default stream, so nothing else in the process stalls it implicitly.
  PSYNC_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
  // Keep freed memory in the pool instead of returning it to the driver at
  // every synchronization: steady-state training then never allocates.
  cudaMemPool_t pool;
  PSYNC_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = UINT64_MAX;
  PSYNC_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  PSYNC_CUBLAS_CHECK(cublasCreate(&ctx->cublas));
  PSYNC_CUBLAS_CHECK(cublasSetStream(ctx->cublas, ctx->stream));
  // Plain FP32 (no TF32) so CUDA results stay close to the CPU reference.
  PSYNC_CUBLAS_CHECK(cublasSetMathMode(ctx->cublas, CUBLAS_DEFAULT_MATH));
  slot = std::move(ctx);
  return *slot;
}

}  // namespace

cudaStream_t ComputeStream(int device) { return Context(device).stream; }
cublasHandle_t CublasHandle(int device) { return Context(device).cublas; }

}  // namespace psync::cuda
