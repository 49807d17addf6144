// Kernel interface of the matrix-product family (internal to worker/tensor).
#pragma once

#include <cstdint>
#include <vector>

#include "psync/tensor/tensor.h"

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

// What is done to the product p = op(a) @ op(b) (accumulated in float32,
// or float64 for float64 operands) before it is stored in c.
enum class Epilogue : uint8_t {
  kNone,      // c = p
  kBias,      // c = p + bias[j]
  kBiasGelu,  // aux = p + bias[j], stored in c's dtype; c = gelu(aux) (the tanh form of ops/nn.h)
  kDGelu,     // c = p * gelu'(aux[i, j]): the gradient through a GELU whose input was aux
};

// c[i...] = epilogue(op(a[i...]) @ op(b[i...])) for every batch index; c
// (and aux) are contiguous [batch_shape..., m, n]. Batch dims of size 1 are
// dropped by the caller.
//
// Rounding: p is rounded once to c's dtype after the epilogue, except that
// the CPU's float32/float64 path (OpenBLAS) stores p in c first and then
// applies the epilogue with the nn/pointwise kernels: the bits of Matmul
// followed by AddBias, Gelu or GeluBackward, as before epilogues existed.
// For kBiasGelu every device computes c from the stored (rounded) aux on
// the CPU; CUDA's cuBLASLt applies GELU to the unrounded value.
struct GemmArgs {
  DType dtype = kFloat32;      // a's and b's; c (and aux) have it too, or float32 for bfloat16 operands
  int device = 0;              // the CUDA device index (unused on the CPU)
  bool allow_tf32 = false;     // float32 on CUDA: TF32 tensor cores (ops::SetAllowTf32)
  Shape batch_shape;
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;
  Tensor c;                    // contiguous [batch_shape..., m, n]
  Epilogue epilogue = Epilogue::kNone;
  Tensor bias;                 // kBias, kBiasGelu: contiguous [n] of MathDType(c.dtype())
  Tensor aux;                  // kBiasGelu: written; kDGelu: read; c's shape and dtype
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
