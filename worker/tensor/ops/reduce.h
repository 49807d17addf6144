// Reductions. Deterministic: a fixed summation order with a double
// accumulator on every device, so N-rank training matches 1 process.
#pragma once

#include "worker/tensor/tensor.h"

namespace psync::ops {

Tensor Sum(const Tensor& x);   // -> shape [], x's dtype
Tensor Mean(const Tensor& x);  // -> shape []; NaN for 0 elements, like torch
// x [..., C] -> [C]: the sum over every leading dimension (a bias gradient).
Tensor SumRows(const Tensor& x);
// Same, into out [C] (undefined: a new tensor); returns it.
Tensor SumRowsInto(Tensor out, const Tensor& x);
// Max |a - b| over all elements (copies to host; float32 or float64, any
// devices, same numel); NaN when any difference is NaN. For tests and checks.
double MaxAbsDiff(const Tensor& a, const Tensor& b);

}  // namespace psync::ops
