// Kernel interface of the reduction family (internal to worker/tensor).
// Arguments are contiguous and share one floating dtype.
#pragma once

#include "worker/tensor/tensor.h"

namespace psync::ops {

class ReduceKernels {
 public:
  virtual ~ReduceKernels() = default;
  // y[0] = (sum of every element of x) / divisor, accumulated in double.
  virtual void Sum(const Tensor& x, double divisor, const Tensor& y) const = 0;
  // x viewed as [rows, cols] with cols = y.numel(): y[j] = sum_i x[i, j],
  // rows in order, in double.
  virtual void SumRows(const Tensor& x, const Tensor& y) const = 0;
};

const ReduceKernels& CpuReduceKernels();
const ReduceKernels& CudaReduceKernels();
const ReduceKernels& ReduceKernelsFor(Device device);

}  // namespace psync::ops
