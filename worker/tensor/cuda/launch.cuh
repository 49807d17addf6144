// Launch helpers shared by the .cu files of psync_tensor (internal).
// Every launch goes on the device's compute stream and returns without
// waiting; launch errors throw TensorError through PSYNC_CUDA_CHECK.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "worker/tensor/cuda/cuda_context.h"

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

}  // namespace psync::cuda

#define PSYNC_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
