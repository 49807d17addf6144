// Reductions. Deterministic: a fixed summation order with a double
// accumulator on every device, so N-rank training matches 1 process.
#pragma once

#include "psync/tensor/tensor.h"

namespace psync::ops {

// x float32, float64 (CPU) or bfloat16; a bfloat16 x is summed into a
// float32 result (every reduction of a bf16 step is float32).
Tensor Sum(const Tensor& x);   // -> shape [], MathDType(x)
Tensor Mean(const Tensor& x);  // -> shape []; NaN for 0 elements, like torch
// x [..., C] -> [C] of MathDType(x): the sum over every leading dimension
// (a bias gradient; from bfloat16 activations straight into float32).
Tensor SumRows(const Tensor& x);
// Same, into out [C] (undefined: a new tensor); returns it.
Tensor SumRowsInto(Tensor out, const Tensor& x);
// Sum of x[i]^2 in double -> float64 [] on x's device (for gradient norms).
// The summation order is fixed and the same on every device (see
// SumOfSquares in reduce_kernels.h), so CPU and CUDA agree bitwise.
Tensor SumOfSquares(const Tensor& x);
// Same, into out: a contiguous one-element float64 tensor on x's device
// (e.g. one slot of a per-parameter buffer); returns it.
Tensor SumOfSquaresInto(Tensor out, const Tensor& x);
// Max |a - b| over all elements (copies to host; float32 or float64, any
// devices, same numel; bfloat16 too); NaN when any difference is NaN. For tests and checks.
double MaxAbsDiff(const Tensor& a, const Tensor& b);

}  // namespace psync::ops
