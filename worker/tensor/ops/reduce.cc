#include "psync/tensor/ops/reduce.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/tensor/ops/check.h"
#include "worker/tensor/ops/reduce_kernels.h"

namespace psync::ops {

const ReduceKernels& ReduceKernelsFor(Device device) {
  return device.is_cpu() ? CpuReduceKernels() : CudaReduceKernels();
}

namespace {
Tensor SumScaled(const char* op, const Tensor& x, bool mean) {
  check::Args args = {{"x", &x}};
  const Device d = check::Defined(op, args);
  const DType dt = MathDType(check::FloatOrBf16(op, args));
  Tensor y = Tensor::Empty({}, dt, d);
  // The double sum divided once, then rounded; 0 elements give NaN for Mean.
  ReduceKernelsFor(d).Sum(x.Contiguous(), mean ? static_cast<double>(x.numel()) : 1.0, y);
  return y;
}
}  // namespace

Tensor Sum(const Tensor& x) { return SumScaled("Sum", x, /*mean=*/false); }
Tensor Mean(const Tensor& x) { return SumScaled("Mean", x, /*mean=*/true); }

Tensor SumRowsInto(Tensor out, const Tensor& x) {
  const char* op = "SumRows";
  check::Args args = {{"x", &x}};
  const Device d = check::Defined(op, args);
  const DType dt = MathDType(check::FloatOrBf16(op, args));
  if (x.dim() < 1) check::Fail(op, args, "x must have at least one dimension");
  const int64_t cols = x.size(-1);
  if (!out.defined()) {
    out = Tensor::Empty({cols}, dt, d);
  } else if (out.device() != d || out.dtype() != dt || out.shape() != Shape{cols} || !out.is_contiguous()) {
    check::Fail(op, args, absl::StrCat("output must be a contiguous [", cols, "] ", DTypeName(dt), " tensor on ",
                                       d.ToString(), ", got ", check::Describe(out)));
  }
  if (cols > 0) ReduceKernelsFor(d).SumRows(x.Contiguous(), out);
  return out;
}

Tensor SumRows(const Tensor& x) { return SumRowsInto(Tensor(), x); }

Tensor SumOfSquaresInto(Tensor out, const Tensor& x) {
  const char* op = "SumOfSquares";
  check::Args args = {{"x", &x}};
  const Device d = check::Defined(op, args);
  check::FloatOrBf16(op, args);
  if (!out.defined()) {
    out = Tensor::Empty({}, kFloat64, d);
  } else if (out.device() != d || out.dtype() != kFloat64 || out.numel() != 1 || !out.is_contiguous()) {
    check::Fail(op, args, absl::StrCat("output must be a one-element float64 tensor on ", d.ToString(), ", got ",
                                       check::Describe(out)));
  }
  ReduceKernelsFor(d).SumOfSquares(x.Contiguous(), out);
  return out;
}

Tensor SumOfSquares(const Tensor& x) { return SumOfSquaresInto(Tensor(), x); }

double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  check::Args args = {{"a", &a}, {"b", &b}};
  check::Defined("MaxAbsDiff", args, /*same_device=*/false);
  check::SameNumel("MaxAbsDiff", args);
  for (const check::Arg& arg : args) {
    if (arg.t->dtype() != kFloat32 && arg.t->dtype() != kFloat64 && arg.t->dtype() != kBFloat16) {
      check::Fail("MaxAbsDiff", args, "compares float32, float64 or bfloat16 tensors");
    }
  }
  auto host = [](const Tensor& t) { return t.To(Device::CPU()).To(kFloat64).ToVector<double>(); };
  const std::vector<double> va = host(a), vb = host(b);
  double m = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    const double diff = std::fabs(va[i] - vb[i]);
    if (std::isnan(diff)) return diff;  // NaN must never look like "equal"
    if (diff > m) m = diff;
  }
  return m;
}

}  // namespace psync::ops
