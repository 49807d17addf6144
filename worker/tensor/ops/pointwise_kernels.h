// Kernel interface of the elementwise family (internal to worker/tensor).
// Every tensor argument is contiguous, with the same floating dtype
// (float32 or bfloat16; float64 on the CPU), already validated by
// ops/pointwise.cc.
// `y` may alias an input (in-place ops).
#pragma once

#include "psync/tensor/ops/pointwise.h"
#include "psync/tensor/tensor.h"

namespace psync::ops {

class PointwiseKernels {
 public:
  virtual ~PointwiseKernels() = default;
  virtual void Binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) const = 0;
  virtual void Scale(const Tensor& x, double s, const Tensor& y) const = 0;
  // y += alpha * x, rounded as y + (alpha*x) (no fused multiply-add).
  virtual void Axpy(double alpha, const Tensor& x, const Tensor& y) const = 0;
  // x viewed as [rows, cols] with cols = bias.numel().
  virtual void AddBias(const Tensor& x, const Tensor& bias, const Tensor& y) const = 0;
  virtual void Relu(const Tensor& x, const Tensor& y) const = 0;
  virtual void ReluBackward(const Tensor& grad, const Tensor& out, const Tensor& y) const = 0;
  // Every element of y = scalar[0] * scale (scalar: one element on y's device).
  virtual void FillFromScalar(const Tensor& scalar, double scale, const Tensor& y) const = 0;
};

const PointwiseKernels& CpuPointwiseKernels();
const PointwiseKernels& CudaPointwiseKernels();
const PointwiseKernels& PointwiseKernelsFor(Device device);

}  // namespace psync::ops
