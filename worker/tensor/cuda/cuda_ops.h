// CUDA backend of psync_tensor, on raw pointers. Internal to worker/tensor/:
// ops.cc checks shapes and devices, then calls these.
//
// This header has no CUDA types so that it compiles without the toolkit.
// With CUDA (PSYNC_WITH_CUDA) the functions live in cuda_ops.cc and
// kernels.cu; without it cuda_stub.cc defines them all to throw TensorError.
//
// Every function that takes `device` runs on that device's compute stream
// (see cuda_context.h) and returns without waiting, except where noted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/tensor/device.h"

namespace psync::cuda_ops {

// Message used by every CUDA path of a build without CUDA.
inline constexpr const char* kNoCudaMessage =
    "psync was built without CUDA support; rebuild with nvcc on PATH";

// Number of visible devices; 0 (never an error) without driver or GPU.
// When 0, *why (if non-null) gets the reason.
int DeviceCount(std::string* why);

// Stream-ordered allocation on the device's compute stream. Allocate throws
// TensorError on failure; Free never throws (it runs in destructors).
void* Allocate(size_t nbytes, int device);
void Free(void* ptr, int device) noexcept;

// Copies nbytes between any two devices (at least one of them CUDA). Copies
// into host memory wait for completion; host-to-device copies return once
// the source has been read (the host buffer may be reused at once).
void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

// Makes `device` current for the calling thread (cudaSetDevice). A process
// that works on one GPU other than cuda:0 (psync-worker with LOCAL_RANK > 0)
// calls it first: otherwise every DeviceGuard restores the thread's default
// device 0 on exit, and since CUDA 12 cudaSetDevice(0) creates a primary
// context (hundreds of MiB) on GPU 0 in every rank's process.
void SetCurrentDevice(int device);

// Waits for everything queued on the device's compute stream.
void Synchronize(int device);

// c[m,n] = op(a) @ op(b) (row-major), through cuBLAS.
void Gemm(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
          const float* b, float* c);

enum class BinaryOp { kAdd, kSub, kMul };
void Binary(int device, BinaryOp op, const float* a, const float* b, float* y, int64_t n);
void Fill(int device, float* y, int64_t n, float value);
// y[i] = *scalar * scale, where scalar is a device pointer (no host sync).
void FillFromDeviceScalar(int device, float* y, int64_t n, const float* scalar, float scale);
void Scale(int device, const float* x, float* y, int64_t n, float s);  // y = s*x (y may be x)
void Axpy(int device, float alpha, const float* x, float* y, int64_t n);
void AddBias(int device, const float* x, const float* bias, float* y, int64_t rows, int64_t cols);
void SumRows(int device, const float* x, float* y, int64_t rows, int64_t cols);
void Relu(int device, const float* x, float* y, int64_t n);
void ReluBackward(int device, const float* grad, const float* out, float* y, int64_t n);
// y[0] = sum(x) / divisor, accumulated in double (divisor 1 for Sum, n for Mean).
void Sum(int device, const float* x, float* y, int64_t n, double divisor);
void LogSoftmax(int device, const float* x, float* y, int64_t rows, int64_t cols);
// out[0] = mean_i -log_softmax(logits)[i, labels[i]]. An out-of-range label
// cannot throw on the device; it makes the loss NaN instead.
void CrossEntropy(int device, const float* logits, const float* labels, float* out, int64_t rows,
                  int64_t cols);
// y = (*grad) * (softmax(logits) - onehot(labels)) / rows; grad is a device pointer.
void CrossEntropyBackward(int device, const float* grad, const float* logits, const float* labels,
                          float* y, int64_t rows, int64_t cols);

}  // namespace psync::cuda_ops
