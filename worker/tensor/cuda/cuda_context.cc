#include "worker/tensor/cuda/cuda_context.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cuda/cuda_device.h"
#include "psync/tensor/tensor.h"

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

namespace {
thread_local int t_current_device = -1;  // -1: not known yet
}  // namespace

int CurrentDevice() {
  if (t_current_device < 0) PSYNC_CUDA_CHECK(cudaGetDevice(&t_current_device));
  return t_current_device;
}

void ForgetCurrentDevice() { t_current_device = -1; }

void SetDevice(int device) {
  if (t_current_device == device) return;
  PSYNC_CUDA_CHECK(cudaSetDevice(device));
  t_current_device = device;
}

DeviceGuard::DeviceGuard(int device) {
  previous_ = CurrentDevice();
  if (previous_ != device) SetDevice(device);
}

DeviceGuard::~DeviceGuard() {
  if (t_current_device != previous_ && cudaSetDevice(previous_) == cudaSuccess) t_current_device = previous_;
}

namespace {

struct DeviceContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* cublas_workspace = nullptr;
  void* lt_workspace = nullptr;
};

// Contexts are created once per device and intentionally never destroyed:
// Storage destructors can run during static destruction and still need the
// stream, and tearing CUDA objects down after the driver unloads crashes.
// Lookups are one acquire load; creation takes the mutex.
constexpr int kMaxDevices = 64;
std::mutex g_mu;
std::atomic<DeviceContext*> g_contexts[kMaxDevices];

DeviceContext& CreateContext(int device);

inline DeviceContext& Context(int device) {
  if (device >= 0 && device < kMaxDevices) {
    if (DeviceContext* ctx = g_contexts[device].load(std::memory_order_acquire)) return *ctx;
  }
  return CreateContext(device);
}

DeviceContext& CreateContext(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (device < 0 || device >= kMaxDevices) throw TensorError(absl::StrCat("invalid CUDA device index ", device));
  if (DeviceContext* ctx = g_contexts[device].load(std::memory_order_acquire)) return *ctx;

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
  // Plain FP32 (no TF32) so CUDA results stay close to the CPU reference;
  // TF32 is asked for per product (ops::SetAllowTf32).
  PSYNC_CUBLAS_CHECK(cublasSetMathMode(ctx->cublas, CUBLAS_DEFAULT_MATH));
  // Workspaces of their own (not from the pool): cuBLAS would otherwise
  // allocate inside a CUDA graph capture.
  PSYNC_CUDA_CHECK(cudaMalloc(&ctx->cublas_workspace, kLtWorkspaceBytes));
  PSYNC_CUBLAS_CHECK(cublasSetWorkspace(ctx->cublas, ctx->cublas_workspace, kLtWorkspaceBytes));
  PSYNC_CUBLAS_CHECK(cublasLtCreate(&ctx->lt));
  PSYNC_CUDA_CHECK(cudaMalloc(&ctx->lt_workspace, kLtWorkspaceBytes));
  DeviceContext* raw = ctx.release();
  g_contexts[device].store(raw, std::memory_order_release);
  return *raw;
}

}  // namespace

cudaStream_t ComputeStream(int device) { return Context(device).stream; }
cublasHandle_t CublasHandle(int device) { return Context(device).cublas; }
cublasLtHandle_t CublasLtHandle(int device) { return Context(device).lt; }
void* CublasLtWorkspace(int device) { return Context(device).lt_workspace; }

}  // namespace psync::cuda
