// Kernel interface of the matrix-product family (internal to worker/tensor).
#pragma once

#include <cstdint>

#include "worker/tensor/tensor.h"

namespace psync::ops {

// One operand of a (batched) product, in row-major BLAS terms: matrix i of
// the batch starts `batch_stride * i` elements after data; `trans` says the
// stored matrix is the transpose of the operand; `ld` is the stored
// matrix's row stride (leading dimension).
struct GemmOperand {
  const void* data = nullptr;
  bool trans = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// c[i] = op(a[i]) @ op(b[i]) for i < batch; c is contiguous [batch, m, n].
struct GemmArgs {
  DType dtype = kFloat32;
  int device = 0;  // the CUDA device index (unused on the CPU)
  int64_t batch = 1, m = 0, n = 0, k = 0;
  GemmOperand a, b;
  void* c = nullptr;
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
