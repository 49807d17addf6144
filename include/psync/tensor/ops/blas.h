// Matrix products (OpenBLAS, or oneDNN for bfloat16, on the CPU; cuBLAS /
// cuBLASLt on CUDA). Inputs may be strided views (a transpose is free: it
// becomes the BLAS transpose flag); other layouts are made contiguous first.
//
// dtypes: float32 anywhere, float64 on the CPU, bfloat16 anywhere (float32
// accumulation, one rounding of the result: torch.autocast's matmuls).
// float32 on CUDA is plain FP32 unless SetAllowTf32(true).
#pragma once

#include "psync/tensor/tensor.h"

namespace psync::ops {

// Float32 products on CUDA may use TF32 tensor cores (as
// torch.backends.cuda.matmul.allow_tf32): process-wide, off by default; no
// effect on the CPU or on other dtypes. --precision=tf32 turns it on
// (nn/precision.h).
void SetAllowTf32(bool allow);
bool AllowTf32();

// op(a) @ op(b), op = transpose when the flag is set. a: [m,k] ([k,m] if
// trans_a), b: [k,n] ([n,k] if trans_b), one dtype. Result [m,n], a's dtype.
Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// Same, written into `out` ([m,n], contiguous, same device, not overlapping
// a or b; e.g. a DDP bucket slot) and returned; an undefined `out` = Matmul.
// `out` has a's dtype, or float32 when a and b are bfloat16 (a weight
// gradient from bfloat16 activations, straight into its float32 slot with
// no bfloat16 rounding). Same values as Matmul otherwise.
Tensor MatmulInto(Tensor out, const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// Batched: a [..., m, k], b [..., k, n] (the last two dims transposed when the
// flags say so) with identical leading (batch) dimensions; result
// [..., m, n]. Each batch entry is exactly Matmul of its two matrices.
Tensor BatchedMatmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// The affine map of a linear layer: x [N, in] @ w [out, in]^T + bias [out]
// -> [N, out] in x's dtype (x and w share it). bias: undefined (none) or
// MathDType(x)'s (float32 for bfloat16 x), added before the result is
// rounded, except on the CPU in float32/float64 where the product is rounded
// first: exactly Matmul(x, w, false, true) then AddBias, bit for bit.
Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& bias);
// Linear, then GELU (ops/nn.h Gelu): y = gelu(pre), pre = Linear(x, w,
// bias) as stored (x's dtype); the backward needs pre. On CUDA one cuBLASLt
// call with the GELU_AUX_BIAS epilogue.
struct LinearGeluResult {
  Tensor y, pre;
};
LinearGeluResult LinearGelu(const Tensor& x, const Tensor& w, const Tensor& bias);
// The gradient through that GELU: (op(a) @ op(b)) * gelu'(pre), pre [m, n]
// of a's dtype (LinearGelu's pre). On the CPU in float32/float64 exactly
// GeluBackward(Matmul(a, b), pre); elsewhere the product is not rounded
// before the multiplication (CUDA: the DGELU epilogue).
Tensor MatmulGeluBackward(const Tensor& a, const Tensor& b, const Tensor& pre, bool trans_a = false,
                          bool trans_b = false);

}  // namespace psync::ops
