// Matrix products (OpenBLAS on the CPU, cuBLAS in FP32 math on CUDA: no
// TF32). Inputs may be strided views (a transpose is free: it becomes the
// BLAS transpose flag); other layouts are made contiguous first.
#pragma once

#include "worker/tensor/tensor.h"

namespace psync::ops {

// op(a) @ op(b), op = transpose when the flag is set. a: [m,k] ([k,m] if
// trans_a), b: [k,n] ([n,k] if trans_b). Result [m,n].
Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// Same, written into `out` ([m,n], contiguous, same device and dtype, not
// overlapping a or b; e.g. a DDP bucket slot) and returned; an undefined
// `out` = Matmul. Same values as Matmul.
Tensor MatmulInto(Tensor out, const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// Batched: a [..., m, k], b [..., k, n] (the last two dims transposed when the
// flags say so) with identical leading (batch) dimensions; result
// [..., m, n]. Each batch entry is exactly Matmul of its two matrices.
Tensor BatchedMatmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace psync::ops
