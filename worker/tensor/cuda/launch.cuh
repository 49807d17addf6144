// Launch helpers shared by the .cu files of psync_tensor (internal).
// Every launch goes on the device's compute stream and returns without
// waiting; launch errors throw TensorError through PSYNC_CUDA_CHECK.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "worker/tensor/cuda/cuda_context.h"
#include "psync/tensor/tensor.h"
#include "worker/tensor/typed_data.h"

namespace psync::cuda {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;  // grid-stride loops cover the rest

inline int BlocksFor(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// Sets the device and gives its compute stream for one launch.
struct Launch {
  explicit Launch(int device) : guard(device), stream(ComputeStream(device)) {}
  DeviceGuard guard;
  cudaStream_t stream;
};

// ---- dtype-generic kernels: storage float or __nv_bfloat16 (the host's
// BFloat16 layout), math in float; the loads and stores of float are the
// identity, so a generic kernel's float32 results are the plain kernel's.
__device__ __forceinline__ float Load(float v) { return v; }
__device__ __forceinline__ float Load(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename S>
__device__ __forceinline__ S Store(float v);
template <>
__device__ __forceinline__ float Store<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 Store<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Typed element pointers of a tensor for a kernel (typed_data.h).
using kernel::In;
using kernel::Out;

}  // namespace psync::cuda

// The CUDA kernels' counterpart of dtype.h's PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16:
// `scalar_t` = float or __nv_bfloat16 for float32 / bfloat16 (float64 is
// computed on the CPU only); anything else throws naming `op`.
#define PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(dtype, op, ...)                                   \
  [&] {                                                                                      \
    switch (dtype) {                                                                         \
      case ::psync::DType::kFloat32: { using scalar_t = float; return __VA_ARGS__(); }       \
      case ::psync::DType::kBFloat16: { using scalar_t = __nv_bfloat16; return __VA_ARGS__(); } \
      default: ::psync::ThrowUnsupportedDType(op, dtype);                                    \
    }                                                                                        \
  }()

// Two storage types (a_t, b_t), each float or __nv_bfloat16.
#define PSYNC_CUDA_DISPATCH_PAIR_FLOAT_AND_BF16(dtype_a, dtype_b, op, ...)                   \
  [&] {                                                                                      \
    const ::psync::DType psync_db_ = (dtype_b);                                              \
    return PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16((dtype_a), op, [&] {                           \
      using a_t = scalar_t;                                                                  \
      return PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(psync_db_, op, [&] {                         \
        using b_t = scalar_t;                                                                \
        return __VA_ARGS__();                                                                \
      });                                                                                    \
    });                                                                                      \
  }()

#define PSYNC_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
