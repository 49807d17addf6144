#include "psync/tensor/ops/pointwise.h"

#include "absl/strings/str_cat.h"
#include "worker/tensor/ops/check.h"
#include "worker/tensor/ops/pointwise_kernels.h"

namespace psync::ops {

const PointwiseKernels& PointwiseKernelsFor(Device device) {
  return device.is_cpu() ? CpuPointwiseKernels() : CudaPointwiseKernels();
}

namespace {

Tensor Binary(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  check::Args args = {{"a", &a}, {"b", &b}};
  const Device d = check::Defined(op, args);
  check::SameShape(op, args);
  const DType dt = check::FloatOrBf16(op, args);
  Tensor y = Tensor::Empty(a.shape(), dt, d);
  if (y.numel() > 0) PointwiseKernelsFor(d).Binary(kind, a.Contiguous(), b.Contiguous(), y);
  return y;
}

// For in-place ops: y (contiguous) and x (any layout) with y's numel and dtype.
Device CheckInPlace(const char* op, const Tensor& y, const Tensor& x) {
  check::Args args = {{"y", &y}, {"x", &x}};
  const Device d = check::Defined(op, args);
  check::SameNumel(op, args);
  check::FloatOrBf16(op, args);
  check::Contiguous(op, args, {"y", &y});
  return d;
}

}  // namespace

Tensor Add(const Tensor& a, const Tensor& b) { return Binary("Add", BinaryOp::kAdd, a, b); }
Tensor Sub(const Tensor& a, const Tensor& b) { return Binary("Sub", BinaryOp::kSub, a, b); }
Tensor Mul(const Tensor& a, const Tensor& b) { return Binary("Mul", BinaryOp::kMul, a, b); }

Tensor Scale(const Tensor& a, float s) {
  check::Args args = {{"a", &a}};
  const Device d = check::Defined("Scale", args);
  const DType dt = check::FloatOrBf16("Scale", args);
  Tensor y = Tensor::Empty(a.shape(), dt, d);
  if (y.numel() > 0) PointwiseKernelsFor(d).Scale(a.Contiguous(), s, y);
  return y;
}

Tensor AddBias(const Tensor& x, const Tensor& bias) {
  const char* op = "AddBias";
  check::Args args = {{"x", &x}, {"bias", &bias}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOrBf16(op, args);
  check::Dim(op, args, {"bias", &bias}, 1);
  if (x.dim() < 1 || x.size(-1) != bias.size(0)) {
    check::Fail(op, args, "bias size must equal the last dimension of x");
  }
  Tensor y = Tensor::Empty(x.shape(), dt, d);
  if (y.numel() > 0) PointwiseKernelsFor(d).AddBias(x.Contiguous(), bias.Contiguous(), y);
  return y;
}

Tensor Relu(const Tensor& x) {
  check::Args args = {{"x", &x}};
  const Device d = check::Defined("Relu", args);
  const DType dt = check::FloatOrBf16("Relu", args);
  Tensor y = Tensor::Empty(x.shape(), dt, d);
  if (y.numel() > 0) PointwiseKernelsFor(d).Relu(x.Contiguous(), y);
  return y;
}

Tensor ReluBackward(const Tensor& grad, const Tensor& relu_out) {
  check::Args args = {{"grad", &grad}, {"relu_out", &relu_out}};
  const Device d = check::Defined("ReluBackward", args);
  check::SameShape("ReluBackward", args);
  const DType dt = check::FloatOrBf16("ReluBackward", args);
  Tensor y = Tensor::Empty(grad.shape(), dt, d);
  if (y.numel() > 0) PointwiseKernelsFor(d).ReluBackward(grad.Contiguous(), relu_out.Contiguous(), y);
  return y;
}

Tensor Expand(const Tensor& scalar, const Shape& shape, float scale) {
  const char* op = "Expand";
  check::Args args = {{"scalar", &scalar}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOrBf16(op, args);
  if (scalar.numel() != 1) check::Fail(op, args, "expects a tensor with exactly one element");
  for (int64_t s : shape) {
    if (s < 0) check::Fail(op, args, absl::StrCat("negative dimension in target shape ", ShapeToString(shape)));
  }
  Tensor y = Tensor::Empty(shape, dt, d);
  if (y.numel() > 0) PointwiseKernelsFor(d).FillFromScalar(scalar, scale, y);
  return y;
}

void Axpy(float alpha, const Tensor& x, const Tensor& y) {
  const Device d = CheckInPlace("Axpy", y, x);
  if (y.numel() > 0) PointwiseKernelsFor(d).Axpy(alpha, x.Contiguous().Reshape(y.shape()), y);
}

void AddInPlace(const Tensor& y, const Tensor& x) {
  const Device d = CheckInPlace("AddInPlace", y, x);
  if (y.numel() > 0) PointwiseKernelsFor(d).Binary(BinaryOp::kAdd, y, x.Contiguous().Reshape(y.shape()), y);
}

void ScaleInPlace(const Tensor& t, float s) {
  check::Args args = {{"t", &t}};
  const Device d = check::Defined("ScaleInPlace", args);
  check::FloatOrBf16("ScaleInPlace", args);
  check::Contiguous("ScaleInPlace", args, {"t", &t});
  if (t.numel() > 0) PointwiseKernelsFor(d).Scale(t, s, t);
}

}  // namespace psync::ops
