// Kernel interface of the copy family (internal to worker/tensor). ops/copy.cc
// validates arguments and picks the device's implementation with
// CopyKernelsFor; cpu/copy.cc and cuda/copy.cu implement it.
#pragma once

#include "psync/tensor/tensor.h"

namespace psync::ops {

class CopyKernels {
 public:
  virtual ~CopyKernels() = default;
  // Every element of `dst` (contiguous, any dtype) = value.
  virtual void Fill(const Tensor& dst, double value) const = 0;
  // dst = src converted to dst's dtype: same shape, same device, any strides.
  virtual void Copy(const Tensor& dst, const Tensor& src) const = 0;
};

const CopyKernels& CpuCopyKernels();
const CopyKernels& CudaCopyKernels();  // throws TensorError in a build without CUDA
const CopyKernels& CopyKernelsFor(Device device);

}  // namespace psync::ops
