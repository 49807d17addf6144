// Filling and copying tensors (any dtype, any device, strided views).
#pragma once

#include "psync/tensor/tensor.h"

namespace psync::ops {

// Every element of `t` (contiguous) = value, converted to t's dtype.
void Fill(const Tensor& t, double value);
// dst = src, element by element in row-major order, converting to dst's
// dtype. Same shape (or, when both are contiguous, the same numel); any
// strides; any two devices. Overlapping views of one storage are safe only
// when both are contiguous with the same dtype; a view copied onto itself
// is left as it is.
void Copy(const Tensor& dst, const Tensor& src);
// Waits until all queued work on `device` is done (no-op on CPU).
void Synchronize(Device device);

}  // namespace psync::ops
