// Elementwise ops. Inputs of one op share shape, dtype and device (no
// broadcasting, except AddBias and Expand); float32 or bfloat16 (computed in
// float32, one rounding per result) anywhere, float64 on the CPU. Strided
// inputs are made contiguous first; results are contiguous.
#pragma once

#include "psync/tensor/tensor.h"

namespace psync::ops {

enum class BinaryOp { kAdd, kSub, kMul };

Tensor Add(const Tensor& a, const Tensor& b);
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Scale(const Tensor& a, float s);
// x [..., C] + bias [C], broadcast over all leading dimensions.
Tensor AddBias(const Tensor& x, const Tensor& bias);
Tensor Relu(const Tensor& x);
Tensor ReluBackward(const Tensor& grad, const Tensor& relu_out);  // grad * (relu_out > 0)
// grad (one element, any device) broadcast to `shape` on grad's device, times `scale`.
Tensor Expand(const Tensor& scalar, const Shape& shape, float scale = 1.0f);

// ---- in place (y contiguous; x any layout, same numel)
void Axpy(float alpha, const Tensor& x, const Tensor& y);  // y += alpha * x
void AddInPlace(const Tensor& y, const Tensor& x);         // y += x
void ScaleInPlace(const Tensor& t, float s);               // t *= s

}  // namespace psync::ops
