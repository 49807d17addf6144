// Shape/device checks and dispatch to cpu_ops (OpenBLAS + loops) or cuda_ops
// (cuBLAS + kernels on the device's compute stream). Outputs are allocated
// here, on the inputs' device.
#include "worker/tensor/ops.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cpu/cpu_ops.h"
#include "worker/tensor/cuda/cuda_ops.h"

namespace psync::ops {

namespace {

struct Arg {
  const char* name;
  const Tensor* t;
};

std::string Describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return absl::StrCat(ShapeToString(t.shape()), " ", t.device().ToString());
}

std::string DescribeAll(std::initializer_list<Arg> args) {
  std::string s;
  for (const Arg& a : args) {
    if (!s.empty()) s += ", ";
    absl::StrAppend(&s, a.name, " ", Describe(*a.t));
  }
  return s;
}

[[noreturn]] void Fail(const char* op, std::initializer_list<Arg> args, const std::string& why) {
  throw TensorError(absl::StrCat(op, "(", DescribeAll(args), "): ", why));
}

// Every argument defined; with same_device, all on the first one's device.
// Returns that device.
Device CheckArgs(const char* op, std::initializer_list<Arg> args, bool same_device = true) {
  for (const Arg& a : args) {
    if (!a.t->defined()) Fail(op, args, absl::StrCat(a.name, " is undefined"));
  }
  const Device d = args.begin()->t->device();
  if (same_device) {
    for (const Arg& a : args) {
      if (a.t->device() != d) Fail(op, args, "inputs are on different devices");
    }
  }
  return d;
}

void CheckDim(const char* op, std::initializer_list<Arg> args, const Arg& a, int64_t dim) {
  if (a.t->dim() != dim) {
    Fail(op, args, absl::StrCat(a.name, " must have ", dim, " dimension(s), got ", a.t->dim()));
  }
}

void CheckSameShape(const char* op, std::initializer_list<Arg> args) {
  const Shape& s = args.begin()->t->shape();
  for (const Arg& a : args) {
    if (a.t->shape() != s) Fail(op, args, "shapes differ");
  }
}

void CheckSameNumel(const char* op, std::initializer_list<Arg> args) {
  const int64_t n = args.begin()->t->numel();
  for (const Arg& a : args) {
    if (a.t->numel() != n) Fail(op, args, "element counts differ");
  }
}

// Elementwise binary op shared by Add/Sub/Mul.
Tensor BinaryOp(const char* op, cuda_ops::BinaryOp kind, const Tensor& a, const Tensor& b) {
  auto args = {Arg{"a", &a}, Arg{"b", &b}};
  const Device d = CheckArgs(op, args);
  CheckSameShape(op, args);
  Tensor y = Tensor::Empty(a.shape(), d);
  const int64_t n = a.numel();
  if (d.is_cpu()) {
    switch (kind) {
      case cuda_ops::BinaryOp::kAdd: cpu_ops::Add(a.data(), b.data(), y.data(), n); break;
      case cuda_ops::BinaryOp::kSub: cpu_ops::Sub(a.data(), b.data(), y.data(), n); break;
      case cuda_ops::BinaryOp::kMul: cpu_ops::Mul(a.data(), b.data(), y.data(), n); break;
    }
  } else {
    cuda_ops::Binary(d.index, kind, a.data(), b.data(), y.data(), n);
  }
  return y;
}

Tensor SumScaled(const char* op, const Tensor& x, bool mean) {
  auto args = {Arg{"x", &x}};
  const Device d = CheckArgs(op, args);
  const int64_t n = x.numel();
  const double divisor = mean ? static_cast<double>(n) : 1.0;
  if (d.is_cpu()) {
    // The double sum divided once, then rounded to float; 0 elements give
    // NaN for Mean, like torch.
    return Tensor::Scalar(static_cast<float>(cpu_ops::SumDouble(x.data(), n) / divisor), d);
  }
  Tensor y = Tensor::Empty({}, d);
  cuda_ops::Sum(d.index, x.data(), y.data(), n, divisor);
  return y;
}

// Logits [N,C] and labels [N] on one device, N > 0 and C > 0.
Device CheckCrossEntropyArgs(const char* op, std::initializer_list<Arg> args, const Tensor& logits,
                             const Tensor& labels) {
  const Device d = CheckArgs(op, args);
  CheckDim(op, args, Arg{"logits", &logits}, 2);
  CheckDim(op, args, Arg{"labels", &labels}, 1);
  if (labels.size(0) != logits.size(0)) {
    Fail(op, args, "labels must have one entry per row of logits");
  }
  if (logits.size(0) == 0 || logits.size(1) == 0) Fail(op, args, "logits must not be empty");
  return d;
}

}  // namespace

namespace {
Tensor MatmulImpl(Tensor* out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const char* op = trans_a ? (trans_b ? "Matmul(a^T, b^T)" : "Matmul(a^T, b)")
                           : (trans_b ? "Matmul(a, b^T)" : "Matmul(a, b)");
  auto args = {Arg{"a", &a}, Arg{"b", &b}};
  const Device d = CheckArgs(op, args);
  CheckDim(op, args, Arg{"a", &a}, 2);
  CheckDim(op, args, Arg{"b", &b}, 2);
  const int64_t m = trans_a ? a.size(1) : a.size(0);
  const int64_t k = trans_a ? a.size(0) : a.size(1);
  const int64_t kb = trans_b ? b.size(1) : b.size(0);
  const int64_t n = trans_b ? b.size(0) : b.size(1);
  if (k != kb) Fail(op, args, absl::StrCat("inner dimensions differ (", k, " vs ", kb, ")"));
  Tensor c;
  if (out != nullptr && out->defined()) {
    if (out->device() != d || out->shape() != Shape{m, n}) {
      Fail(op, args, absl::StrCat("output must be a [", m, ", ", n, "] tensor on ", d.ToString(), ", got ",
                                  out->DebugString()));
    }
    c = *out;
  } else {
    c = Tensor::Empty({m, n}, d);
  }
  if (d.is_cpu()) {
    cpu_ops::Gemm(trans_a, trans_b, m, n, k, a.data(), b.data(), c.data());
  } else {
    cuda_ops::Gemm(d.index, trans_a, trans_b, m, n, k, a.data(), b.data(), c.data());
  }
  return c;
}
}  // namespace

Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  return MatmulImpl(nullptr, a, b, trans_a, trans_b);
}

Tensor MatmulInto(Tensor out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  return MatmulImpl(&out, a, b, trans_a, trans_b);
}

Tensor AddBias(const Tensor& x, const Tensor& bias) {
  const char* op = "AddBias";
  auto args = {Arg{"x", &x}, Arg{"bias", &bias}};
  const Device d = CheckArgs(op, args);
  CheckDim(op, args, Arg{"x", &x}, 2);
  CheckDim(op, args, Arg{"bias", &bias}, 1);
  if (bias.size(0) != x.size(1)) Fail(op, args, "bias size must equal the number of columns of x");
  Tensor y = Tensor::Empty(x.shape(), d);
  if (d.is_cpu()) {
    cpu_ops::AddBias(x.data(), bias.data(), y.data(), x.size(0), x.size(1));
  } else {
    cuda_ops::AddBias(d.index, x.data(), bias.data(), y.data(), x.size(0), x.size(1));
  }
  return y;
}

Tensor SumRowsInto(Tensor out, const Tensor& x) {
  const char* op = "SumRows";
  auto args = {Arg{"x", &x}};
  const Device d = CheckArgs(op, args);
  CheckDim(op, args, Arg{"x", &x}, 2);
  if (!out.defined()) {
    out = Tensor::Empty({x.size(1)}, d);
  } else if (out.device() != d || out.shape() != Shape{x.size(1)}) {
    Fail(op, args, absl::StrCat("output must be [", x.size(1), "] on ", d.ToString(), ", got ", out.DebugString()));
  }
  if (d.is_cpu()) {
    cpu_ops::SumRows(x.data(), out.data(), x.size(0), x.size(1));
  } else {
    cuda_ops::SumRows(d.index, x.data(), out.data(), x.size(0), x.size(1));
  }
  return out;
}

Tensor SumRows(const Tensor& x) { return SumRowsInto(Tensor(), x); }

Tensor Add(const Tensor& a, const Tensor& b) { return BinaryOp("Add", cuda_ops::BinaryOp::kAdd, a, b); }
Tensor Sub(const Tensor& a, const Tensor& b) { return BinaryOp("Sub", cuda_ops::BinaryOp::kSub, a, b); }
Tensor Mul(const Tensor& a, const Tensor& b) { return BinaryOp("Mul", cuda_ops::BinaryOp::kMul, a, b); }

Tensor Scale(const Tensor& a, float s) {
  const Device d = CheckArgs("Scale", {Arg{"a", &a}});
  Tensor y = Tensor::Empty(a.shape(), d);
  if (d.is_cpu()) {
    cpu_ops::Scale(a.data(), y.data(), a.numel(), s);
  } else {
    cuda_ops::Scale(d.index, a.data(), y.data(), a.numel(), s);
  }
  return y;
}

Tensor Relu(const Tensor& x) {
  const Device d = CheckArgs("Relu", {Arg{"x", &x}});
  Tensor y = Tensor::Empty(x.shape(), d);
  if (d.is_cpu()) {
    cpu_ops::Relu(x.data(), y.data(), x.numel());
  } else {
    cuda_ops::Relu(d.index, x.data(), y.data(), x.numel());
  }
  return y;
}

Tensor ReluBackward(const Tensor& grad, const Tensor& relu_out) {
  auto args = {Arg{"grad", &grad}, Arg{"relu_out", &relu_out}};
  const Device d = CheckArgs("ReluBackward", args);
  CheckSameShape("ReluBackward", args);
  Tensor y = Tensor::Empty(grad.shape(), d);
  if (d.is_cpu()) {
    cpu_ops::ReluBackward(grad.data(), relu_out.data(), y.data(), grad.numel());
  } else {
    cuda_ops::ReluBackward(d.index, grad.data(), relu_out.data(), y.data(), grad.numel());
  }
  return y;
}

Tensor Sum(const Tensor& x) { return SumScaled("Sum", x, /*mean=*/false); }
Tensor Mean(const Tensor& x) { return SumScaled("Mean", x, /*mean=*/true); }

Tensor LogSoftmax(const Tensor& logits) {
  const char* op = "LogSoftmax";
  auto args = {Arg{"logits", &logits}};
  const Device d = CheckArgs(op, args);
  CheckDim(op, args, Arg{"logits", &logits}, 2);
  Tensor y = Tensor::Empty(logits.shape(), d);
  // [N, 0] or [0, C]: nothing to normalise, and the kernels read x[0] of every row.
  if (y.numel() == 0) return y;
  if (d.is_cpu()) {
    cpu_ops::LogSoftmax(logits.data(), y.data(), logits.size(0), logits.size(1));
  } else {
    cuda_ops::LogSoftmax(d.index, logits.data(), y.data(), logits.size(0), logits.size(1));
  }
  return y;
}

Tensor CrossEntropy(const Tensor& logits, const Tensor& labels) {
  const char* op = "CrossEntropy";
  auto args = {Arg{"logits", &logits}, Arg{"labels", &labels}};
  const Device d = CheckCrossEntropyArgs(op, args, logits, labels);
  const int64_t rows = logits.size(0), cols = logits.size(1);
  if (d.is_cpu()) {
    return Tensor::Scalar(cpu_ops::CrossEntropy(logits.data(), labels.data(), rows, cols), d);
  }
  Tensor y = Tensor::Empty({}, d);
  cuda_ops::CrossEntropy(d.index, logits.data(), labels.data(), y.data(), rows, cols);
  return y;
}

Tensor CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& labels) {
  const char* op = "CrossEntropyBackward";
  auto args = {Arg{"grad", &grad}, Arg{"logits", &logits}, Arg{"labels", &labels}};
  CheckArgs(op, args, /*same_device=*/false);
  const Device d = CheckCrossEntropyArgs(op, {Arg{"logits", &logits}, Arg{"labels", &labels}},
                                         logits, labels);
  if (grad.numel() != 1) Fail(op, args, "grad must hold exactly one element");
  const int64_t rows = logits.size(0), cols = logits.size(1);
  Tensor y = Tensor::Empty(logits.shape(), d);
  if (d.is_cpu()) {
    // grad may live on a GPU (Item() then waits for it); normally it is on d.
    cpu_ops::CrossEntropyBackward(grad.Item(), logits.data(), labels.data(), y.data(), rows, cols);
  } else {
    // Keep grad on the device so nothing waits for the host.
    const Tensor g = grad.To(d);
    cuda_ops::CrossEntropyBackward(d.index, g.data(), logits.data(), labels.data(), y.data(), rows,
                                   cols);
  }
  return y;
}

Tensor Expand(const Tensor& scalar, const Shape& shape, float scale) {
  const char* op = "Expand";
  auto args = {Arg{"scalar", &scalar}};
  const Device d = CheckArgs(op, args);
  if (scalar.numel() != 1) Fail(op, args, "expects a tensor with exactly one element");
  for (int64_t s : shape) {
    if (s < 0) Fail(op, args, absl::StrCat("negative dimension in target shape ", ShapeToString(shape)));
  }
  Tensor y = Tensor::Empty(shape, d);
  if (d.is_cpu()) {
    cpu_ops::Fill(y.data(), y.numel(), scalar.data()[0] * scale);
  } else {
    cuda_ops::FillFromDeviceScalar(d.index, y.data(), y.numel(), scalar.data(), scale);
  }
  return y;
}

void Fill(Tensor& t, float value) {
  const Device d = CheckArgs("Fill", {Arg{"t", &t}});
  if (d.is_cpu()) {
    cpu_ops::Fill(t.data(), t.numel(), value);
  } else {
    cuda_ops::Fill(d.index, t.data(), t.numel(), value);
  }
}

void Copy(Tensor& dst, const Tensor& src) {
  auto args = {Arg{"dst", &dst}, Arg{"src", &src}};
  CheckArgs("Copy", args, /*same_device=*/false);
  CheckSameNumel("Copy", args);
  const size_t nbytes = src.nbytes();
  if (nbytes == 0 || dst.data() == src.data()) return;
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    std::memmove(dst.data(), src.data(), nbytes);  // views of one storage may overlap
  } else {
    cuda_ops::CopyBytes(dst.data(), dst.device(), src.data(), src.device(), nbytes);
  }
}

void Axpy(float alpha, const Tensor& x, Tensor& y) {
  auto args = {Arg{"x", &x}, Arg{"y", &y}};
  const Device d = CheckArgs("Axpy", args);
  CheckSameNumel("Axpy", args);
  if (d.is_cpu()) {
    cpu_ops::Axpy(alpha, x.data(), y.data(), x.numel());
  } else {
    cuda_ops::Axpy(d.index, alpha, x.data(), y.data(), x.numel());
  }
}

void AddInPlace(Tensor& y, const Tensor& x) {
  auto args = {Arg{"y", &y}, Arg{"x", &x}};
  const Device d = CheckArgs("AddInPlace", args);
  CheckSameNumel("AddInPlace", args);
  if (d.is_cpu()) {
    cpu_ops::Add(y.data(), x.data(), y.data(), y.numel());
  } else {
    cuda_ops::Binary(d.index, cuda_ops::BinaryOp::kAdd, y.data(), x.data(), y.data(), y.numel());
  }
}

void ScaleInPlace(Tensor& t, float s) {
  const Device d = CheckArgs("ScaleInPlace", {Arg{"t", &t}});
  if (d.is_cpu()) {
    cpu_ops::Scale(t.data(), t.data(), t.numel(), s);
  } else {
    cuda_ops::Scale(d.index, t.data(), t.data(), t.numel(), s);
  }
}

float MaxAbsDiff(const Tensor& a, const Tensor& b) {
  auto args = {Arg{"a", &a}, Arg{"b", &b}};
  CheckArgs("MaxAbsDiff", args, /*same_device=*/false);
  CheckSameNumel("MaxAbsDiff", args);
  const std::vector<float> va = a.ToVector(), vb = b.ToVector();
  float m = 0.0f;
  for (size_t i = 0; i < va.size(); ++i) {
    const float diff = std::fabs(va[i] - vb[i]);
    if (std::isnan(diff)) return diff;  // NaN must never look like "equal"
    if (diff > m) m = diff;
  }
  return m;
}

void Synchronize(Device device) {
  if (device.is_cpu()) return;  // CPU ops are synchronous
  cuda_ops::Synchronize(device.index);
}

}  // namespace psync::ops
