// Kernel interface of the reduction family (internal to worker/tensor).
// Arguments are contiguous; x is float32, float64 or bfloat16, and the
// sums (y) have x's math dtype (float32 for bfloat16).
#pragma once

#include "psync/tensor/tensor.h"

namespace psync::ops {

class ReduceKernels {
 public:
  virtual ~ReduceKernels() = default;
  // y[0] = (sum of every element of x) / divisor, accumulated in double.
  virtual void Sum(const Tensor& x, double divisor, const Tensor& y) const = 0;
  // x viewed as [rows, cols] with cols = y.numel(): y[j] = sum_i x[i, j] in
  // double, in this order on every device: the rows in chunks of
  // kSumRowsChunk, each chunk summed in row order, then the chunk sums in
  // chunk order. Chunks give a GPU rows x cols / kSumRowsChunk threads
  // (a column per thread walking all 8192 rows of a GPT-2 batch left the
  // GPU idle: 768 threads); the fixed order keeps CPU and CUDA bitwise equal.
  virtual void SumRows(const Tensor& x, const Tensor& y) const = 0;
  // out[0] (float64) = sum of x[i]^2 (each square exact in double), in the
  // fixed order below, the same on every device:
  //   lanes: element i is added to lane i % kSquaresLanes, in increasing i;
  //   each block of kSquaresBlockLanes consecutive lanes is then summed as a
  //   tree: for s = kSquaresBlockLanes/2, ..., 1: lane[t] += lane[t + s]
  //   (t < s); the kSquaresBlocks block sums likewise, for s = 32, ..., 1.
  // The shape is a CUDA grid of kSquaresBlocks blocks of kSquaresBlockLanes
  // threads, wide enough to stream a large tensor and fixed so the result
  // never depends on the device or its launch limits.
  virtual void SumOfSquares(const Tensor& x, const Tensor& out) const = 0;
};

inline constexpr int64_t kSumRowsChunk = 64;
inline constexpr int kSquaresBlocks = 64;
inline constexpr int kSquaresBlockLanes = 256;
inline constexpr int kSquaresLanes = kSquaresBlocks * kSquaresBlockLanes;

const ReduceKernels& CpuReduceKernels();
const ReduceKernels& CudaReduceKernels();
const ReduceKernels& ReduceKernelsFor(Device device);

}  // namespace psync::ops
