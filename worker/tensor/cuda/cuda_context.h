// Per-device CUDA state shared by psync_tensor and the NCCL process group.
// Only meaningful when PSYNC_WITH_CUDA is defined (psync_tensor defines it
// PUBLIC when built with nvcc); include it only under that macro.
//
// Streams and ownership:
//  - Each device has ONE compute stream (non-blocking, created on first use,
//    never destroyed). Every tensor op, copy, allocation (cudaMallocAsync)
//    and free (cudaFreeAsync) for that device is queued on it, so ops run in
//    issue order without host synchronization.
//  - The cuBLAS and cuBLASLt handles of a device are bound to (used on) its
//    compute stream, with one workspace each that lives as long as the
//    process (so a captured CUDA graph never allocates for them).
//  - Per launch there is no host work beyond the launch itself: the context
//    lookup is one atomic load, and DeviceGuard consults a per-thread cache
//    of the current device instead of calling cudaGetDevice (psync changes
//    the current device only through DeviceGuard and
//    cuda_device::SetCurrentDevice, which keep the cache true; code outside
//    psync that calls cudaSetDevice directly must call
//    cuda::ForgetCurrentDevice() afterwards).
//  - Memory comes from the device's default memory pool with a release
//    threshold of "never", so freed blocks stay cached for reuse.
//  - Another stream (e.g. NCCL's communication stream) that reads or writes a
//    tensor must (1) wait on an event recorded on the compute stream after
//    the producing op, and (2) before the tensor's storage can be freed or
//    reused by a later op, make the compute stream wait on an event recorded
//    on its own stream after the last use. Storage frees are ordered on the
//    compute stream only.
#pragma once

#ifdef PSYNC_WITH_CUDA

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace psync::cuda {

// Compute stream of `device` (created, with the pool configured, on first use).
// Throws psync::TensorError when the device cannot be used.
cudaStream_t ComputeStream(int device);
// cuBLAS handle of `device`, bound to ComputeStream(device).
cublasHandle_t CublasHandle(int device);
// cuBLASLt handle of `device` (cublasLtMatmul takes the stream per call)
// and the workspace its matmuls may use (kLtWorkspaceBytes, device memory
// that lives as long as the process; used on the compute stream only).
cublasLtHandle_t CublasLtHandle(int device);
void* CublasLtWorkspace(int device);
inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// The calling thread's current device as psync last set or saw it (one
// cudaGetDevice the first time on each thread).
int CurrentDevice();
// Drops the calling thread's cached current device (after a cudaSetDevice
// outside psync).
void ForgetCurrentDevice();
// cudaSetDevice through the cache.
void SetDevice(int device);

// Throws psync::TensorError("<call> failed at file:line: <error string>")
// when err != cudaSuccess.
void CheckCuda(cudaError_t err, const char* call, const char* file, int line);
void CheckCublas(cublasStatus_t status, const char* call, const char* file, int line);

// Makes `device` current for the scope and restores the previous one; no
// CUDA call at all when it already is current (the usual case).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace psync::cuda

#define PSYNC_CUDA_CHECK(expr) ::psync::cuda::CheckCuda((expr), #expr, __FILE__, __LINE__)
#define PSYNC_CUBLAS_CHECK(expr) ::psync::cuda::CheckCublas((expr), #expr, __FILE__, __LINE__)

#endif  // PSYNC_WITH_CUDA
