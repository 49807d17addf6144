// Kernel interface of the matrix-product family (internal to worker/tensor).
#pragma once

#include <cstdint>
#include <vector>

#include "worker/tensor/tensor.h"

namespace psync::ops {

// One operand of a (batched) product, in row-major BLAS terms: the matrix
// at batch index (i0, i1, ...) starts sum(i_d * batch_strides[d]) elements
// after data; `trans` says the stored matrix is the transpose of the
// operand; `ld` is the stored matrix's row stride (leading dimension).
struct GemmOperand {
  const void* data = nullptr;
  bool trans = false;
  int64_t ld = 0;
  std::vector<int64_t> batch_strides;  // one per batch dim
};

// c[i...] = op(a[i...]) @ op(b[i...]) for every batch index; c is contiguous
// [batch_shape..., m, n]. Batch dims of size 1 are dropped by the caller.
struct GemmArgs {
  DType dtype = kFloat32;
  int device = 0;  // the CUDA device index (unused on the CPU)
  Shape batch_shape;
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;
  void* c = nullptr;
  int64_t batch() const { return NumelOf(batch_shape); }
};

class BlasKernels {
 public:
  virtual ~BlasKernels() = default;
  virtual void Gemm(const GemmArgs& args) const = 0;
};

const BlasKernels& CpuBlasKernels();
const BlasKernels& CudaBlasKernels();
const BlasKernels& BlasKernelsFor(Device device);

}  // namespace psync::ops
