#include "psync/tensor/ops/nn.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "worker/tensor/ops/check.h"
#include "psync/tensor/ops/copy.h"
#include "worker/tensor/ops/nn_kernels.h"

namespace psync::ops {

const NnKernels& NnKernelsFor(Device device) { return device.is_cpu() ? CpuNnKernels() : CudaNnKernels(); }

namespace {

// logits [N,C] float and targets [N] int64 on one device, N > 0 and C > 0.
Device CheckCrossEntropyArgs(const char* op, check::Args args, const Tensor& logits, const Tensor& targets) {
  const Device d = check::Defined(op, args);
  check::FloatOrBf16(op, {{"logits", &logits}});
  check::Dim(op, args, {"logits", &logits}, 2);
  check::Dim(op, args, {"targets", &targets}, 1);
  check::DTypeIs(op, args, {"targets", &targets}, kInt64);
  if (targets.size(0) != logits.size(0)) check::Fail(op, args, "targets must have one entry per row of logits");
  if (logits.size(0) == 0 || logits.size(1) == 0) check::Fail(op, args, "logits must not be empty");
  return d;
}

Shape LeadingDims(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 1); }

// grad [..., C] must be ids' shape + [C]; returns C.
int64_t CheckRowsOf(const char* op, check::Args args, const Tensor& rows, const char* rows_name, const Shape& lead,
                    const char* lead_name) {
  if (rows.dim() != static_cast<int64_t>(lead.size()) + 1 || LeadingDims(rows) != lead) {
    check::Fail(op, args, absl::StrCat(rows_name, " must have the shape of ", lead_name, " plus one last dimension"));
  }
  return rows.size(-1);
}

// x [..., C] with C > 0, weight [C]; returns C.
int64_t CheckLayerNormShapes(const char* op, check::Args args, const Tensor& x, const Tensor& weight) {
  if (x.dim() < 1) check::Fail(op, args, "x must have at least one dimension (the normalized one)");
  const int64_t c = x.size(-1);
  if (c == 0) check::Fail(op, args, "the normalized (last) dimension of x is empty");
  if (weight.shape() != Shape{c}) {
    check::Fail(op, args, absl::StrCat("weight must be [", c, "] (the last dimension of x)"));
  }
  return c;
}

void CheckSquareScores(const char* op, check::Args args, const Tensor& t, const char* name) {
  if (t.dim() < 2 || t.size(-1) != t.size(-2)) {
    check::Fail(op, args, absl::StrCat(name, " must be [..., T, T] (query by key positions)"));
  }
}

void CheckScale(const char* op, check::Args args, double scale) {
  if (!std::isfinite(scale)) check::Fail(op, args, absl::StrCat("scale must be finite, got ", scale));
}

}  // namespace

Tensor LogSoftmax(const Tensor& logits) {
  const char* op = "LogSoftmax";
  check::Args args = {{"logits", &logits}};
  const Device d = check::Defined(op, args);
  const DType dt = check::ComputeFloat(op, args);
  check::Dim(op, args, {"logits", &logits}, 2);
  Tensor y = Tensor::Empty(logits.shape(), dt, d);
  // [N, 0] or [0, C]: nothing to normalise, and the kernels read x[0] of every row.
  if (y.numel() == 0) return y;
  NnKernelsFor(d).LogSoftmax(logits.Contiguous(), y);
  return y;
}

Tensor CrossEntropy(const Tensor& logits, const Tensor& targets) {
  const char* op = "CrossEntropy";
  const Device d = CheckCrossEntropyArgs(op, {{"logits", &logits}, {"targets", &targets}}, logits, targets);
  Tensor loss = Tensor::Empty({}, MathDType(logits.dtype()), d);
  NnKernelsFor(d).CrossEntropy(logits.Contiguous(), targets.Contiguous(), loss);
  return loss;
}

Tensor CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets) {
  const char* op = "CrossEntropyBackward";
  check::Args args = {{"grad", &grad}, {"logits", &logits}, {"targets", &targets}};
  check::Defined(op, args, /*same_device=*/false);
  const Device d = CheckCrossEntropyArgs(op, {{"logits", &logits}, {"targets", &targets}}, logits, targets);
  if (grad.numel() != 1) check::Fail(op, args, "grad must hold exactly one element");
  if (grad.dtype() != MathDType(logits.dtype())) {
    check::Fail(op, args, "grad must have the loss's dtype (logits' math dtype: float32 for bfloat16 logits)");
  }
  Tensor dlogits = Tensor::Empty(logits.shape(), logits.dtype(), d);
  // grad normally lives on d already; To() is then free and nothing waits for the host.
  NnKernelsFor(d).CrossEntropyBackward(grad.To(d), logits.Contiguous(), targets.Contiguous(), dlogits);
  return dlogits;
}

namespace {

// logits [N, C] (float32, bfloat16, float64 on the CPU) with unit column
// stride, possibly strided rows; targets [N] int64; N, C > 0.
void CheckClassifierLogits(const char* op, check::Args args, const Tensor& logits) {
  const DType dt = logits.dtype();
  if (!(dt == kFloat32 || dt == kBFloat16 || (dt == kFloat64 && logits.device().is_cpu()))) {
    check::Fail(op, args, "logits must be float32, bfloat16 or (CPU) float64");
  }
  check::Dim(op, args, {"logits", &logits}, 2);
  if (logits.size(0) == 0 || logits.size(1) == 0) check::Fail(op, args, "logits must not be empty");
  if (logits.stride(1) != 1 || logits.stride(0) < logits.size(1)) {
    check::Fail(op, args, "logits must be rows with contiguous columns (it is written in place)");
  }
}

}  // namespace

Tensor FusedClassifier(const Tensor& logits, const Tensor& targets, float grad_scale) {
  const char* op = "FusedClassifier";
  check::Args args = {{"logits", &logits}, {"targets", &targets}};
  const Device d = check::Defined(op, args);
  CheckClassifierLogits(op, args, logits);
  check::Dim(op, args, {"targets", &targets}, 1);
  check::DTypeIs(op, args, {"targets", &targets}, kInt64);
  if (targets.size(0) != logits.size(0)) check::Fail(op, args, "targets must have one entry per row of logits");
  if (!std::isfinite(grad_scale)) check::Fail(op, args, absl::StrCat("grad_scale must be finite, got ", grad_scale));
  Tensor loss = Tensor::Empty({}, logits.dtype() == kFloat64 ? kFloat64 : kFloat32, d);
  NnKernelsFor(d).FusedClassifier(logits, targets.Contiguous(), grad_scale, loss);
  return loss;
}

void RescaleClassifierGrad(const Tensor& dlogits, const Tensor& grad, float grad_scale) {
  const char* op = "RescaleClassifierGrad";
  check::Args args = {{"dlogits", &dlogits}, {"grad", &grad}};
  const Device d = check::Defined(op, args);
  CheckClassifierLogits(op, args, dlogits);
  if (grad.numel() != 1) check::Fail(op, args, "grad must hold exactly one element");
  const DType loss_dt = dlogits.dtype() == kFloat64 ? kFloat64 : kFloat32;
  if (grad.dtype() != loss_dt) check::Fail(op, args, absl::StrCat("grad must be ", DTypeName(loss_dt), " (the loss's dtype)"));
  if (!(grad_scale != 0.0f) || !std::isfinite(grad_scale)) {
    check::Fail(op, args, absl::StrCat("grad_scale must be finite and nonzero, got ", grad_scale));
  }
  NnKernelsFor(d).RescaleClassifierGrad(dlogits, grad, grad_scale);
}

// ---------------------------------------------------------------- GPT layers

Tensor Embedding(const Tensor& ids, const Tensor& weight) {
  const char* op = "Embedding";
  check::Args args = {{"ids", &ids}, {"weight", &weight}};
  const Device d = check::Defined(op, args);
  check::DTypeIs(op, args, {"ids", &ids}, kInt64);
  const DType dt = check::FloatOperand(op, args, {"weight", &weight});
  check::Dim(op, args, {"weight", &weight}, 2);
  Shape shape = ids.shape();
  shape.push_back(weight.size(1));
  Tensor y = Tensor::Empty(shape, dt, d);
  if (y.numel() == 0) return y;
  NnKernelsFor(d).Embedding(ids.Contiguous(), weight.Contiguous(), y.Reshape({-1, weight.size(1)}));
  return y;
}

Tensor EmbeddingBackwardInto(Tensor out, const Tensor& grad, const Tensor& ids, int64_t num_rows) {
  const char* op = "EmbeddingBackward";
  check::Args args = {{"grad", &grad}, {"ids", &ids}};
  const Device d = check::Defined(op, args);
  check::DTypeIs(op, args, {"ids", &ids}, kInt64);
  const DType dt = check::FloatOperand(op, args, {"grad", &grad});
  const int64_t c = CheckRowsOf(op, args, grad, "grad", ids.shape(), "ids");
  if (num_rows < 0) check::Fail(op, args, absl::StrCat("num_rows must be >= 0, got ", num_rows));
  out = check::Destination(op, args, "out", std::move(out), {num_rows, c}, dt, d);
  if (out.numel() == 0) return out;
  if (ids.numel() == 0) {
    Fill(out, 0.0);
    return out;
  }
  NnKernelsFor(d).EmbeddingBackward(grad.Contiguous().Reshape({-1, c}), ids.Contiguous(), out);
  return out;
}

Tensor EmbeddingBackward(const Tensor& grad, const Tensor& ids, int64_t num_rows) {
  return EmbeddingBackwardInto(Tensor(), grad, ids, num_rows);
}

namespace {

// weight and bias [C] of x's math dtype, eps finite and >= 0; returns C.
int64_t CheckLayerNormParams(const char* op, check::Args args, const Tensor& x, const Tensor& weight,
                             const Tensor& bias, double eps) {
  const int64_t c = CheckLayerNormShapes(op, args, x, weight);
  if (bias.shape() != Shape{c}) check::Fail(op, args, absl::StrCat("bias must be [", c, "] (the last dimension of x)"));
  const DType math = MathDType(x.dtype());
  if (weight.dtype() != math || bias.dtype() != math) {
    check::Fail(op, args, absl::StrCat("weight and bias must be ", DTypeName(math), " (x's math dtype)"));
  }
  if (!(eps >= 0.0) || !std::isfinite(eps)) check::Fail(op, args, absl::StrCat("eps must be finite and >= 0, got ", eps));
  return c;
}

// An output dtype that may differ from x's: x's own, or bfloat16 /
// float32 within the float32 family (float64 only with float64).
void CheckOutDType(const char* op, check::Args args, DType x, DType out) {
  const bool ok = out == x || (MathDType(x) == kFloat32 && (out == kFloat32 || out == kBFloat16));
  if (!ok) check::Fail(op, args, absl::StrCat("cannot produce ", DTypeName(out), " from ", DTypeName(x)));
}

}  // namespace

LayerNormResult LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return LayerNorm(x, weight, bias, eps, x.defined() ? x.dtype() : kFloat32);
}

LayerNormResult LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, DType out_dtype) {
  const char* op = "LayerNorm";
  check::Args args = {{"x", &x}, {"weight", &weight}, {"bias", &bias}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOrBf16Operand(op, args, {"x", &x});
  const int64_t c = CheckLayerNormParams(op, args, x, weight, bias, eps);
  CheckOutDType(op, args, dt, out_dtype);
  LayerNormResult r;
  r.y = Tensor::Empty(x.shape(), out_dtype, d);
  r.mean = Tensor::Empty(LeadingDims(x), MathDType(dt), d);
  r.rstd = Tensor::Empty(LeadingDims(x), MathDType(dt), d);
  if (x.numel() == 0) return r;
  const Shape rows = {-1, c};
  NnKernelsFor(d).LayerNorm(x.Contiguous().Reshape(rows), weight.Contiguous(), bias.Contiguous(), eps,
                            r.y.Reshape(rows), r.mean.Reshape({-1}), r.rstd.Reshape({-1}));
  return r;
}

ResidualLayerNormResult ResidualLayerNorm(const Tensor& x, const Tensor& a, const Tensor& weight, const Tensor& bias,
                                          double eps, DType out_dtype) {
  const char* op = "ResidualLayerNorm";
  check::Args args = {{"x", &x}, {"a", &a}, {"weight", &weight}, {"bias", &bias}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOrBf16Operand(op, args, {"x", &x});
  check::FloatOrBf16Operand(op, args, {"a", &a});
  if (dt != MathDType(dt)) check::Fail(op, args, "x (the residual stream) must be float32 or float64");
  if (a.shape() != x.shape()) check::Fail(op, args, "a must have x's shape");
  CheckOutDType(op, args, dt, a.dtype());
  const int64_t c = CheckLayerNormParams(op, args, x, weight, bias, eps);
  CheckOutDType(op, args, dt, out_dtype);
  ResidualLayerNormResult r;
  r.h = Tensor::Empty(x.shape(), dt, d);
  r.y = Tensor::Empty(x.shape(), out_dtype, d);
  r.mean = Tensor::Empty(LeadingDims(x), dt, d);
  r.rstd = Tensor::Empty(LeadingDims(x), dt, d);
  if (x.numel() == 0) return r;
  const Shape rows = {-1, c};
  NnKernelsFor(d).ResidualLayerNorm(x.Contiguous().Reshape(rows), a.Contiguous().Reshape(rows), weight.Contiguous(),
                                    bias.Contiguous(), eps, r.h.Reshape(rows), r.y.Reshape(rows),
                                    r.mean.Reshape({-1}), r.rstd.Reshape({-1}));
  return r;
}

LayerNormGrads LayerNormBackward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd, Tensor dweight_out, Tensor dbias_out,
                                 const Tensor& residual_grad) {
  const char* op = "LayerNormBackward";
  check::Args args = {{"grad", &grad}, {"x", &x}, {"weight", &weight}, {"mean", &mean}, {"rstd", &rstd}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOrBf16Operand(op, args, {"x", &x});
  CheckOutDType(op, args, dt, check::FloatOrBf16Operand(op, args, {"grad", &grad}));
  const DType math = MathDType(dt);
  const int64_t c = CheckLayerNormShapes(op, args, x, weight);
  if (grad.shape() != x.shape()) check::Fail(op, args, "grad must have x's shape");
  if (mean.shape() != LeadingDims(x) || rstd.shape() != LeadingDims(x)) {
    check::Fail(op, args, "mean and rstd must have x's shape without its last dimension");
  }
  if (weight.dtype() != math || mean.dtype() != math || rstd.dtype() != math) {
    check::Fail(op, args, absl::StrCat("weight, mean and rstd must be ", DTypeName(math), " (x's math dtype)"));
  }
  if (residual_grad.defined() &&
      (residual_grad.shape() != x.shape() || residual_grad.dtype() != dt || residual_grad.device() != d)) {
    check::Fail(op, args, absl::StrCat("residual_grad must be a ", ShapeToString(x.shape()), " ", DTypeName(dt),
                                       " tensor on ", d.ToString(), ", got ", check::Describe(residual_grad)));
  }
  LayerNormGrads g;
  g.dx = Tensor::Empty(x.shape(), dt, d);
  g.dweight = check::Destination(op, args, "dweight", std::move(dweight_out), {c}, math, d);
  g.dbias = check::Destination(op, args, "dbias", std::move(dbias_out), {c}, math, d);
  if (x.numel() == 0) {
    Fill(g.dweight, 0.0);
    Fill(g.dbias, 0.0);
    return g;
  }
  const Shape rows = {-1, c};
  NnKernelsFor(d).LayerNormBackward(grad.Contiguous().Reshape(rows), x.Contiguous().Reshape(rows), weight.Contiguous(),
                                    mean.Contiguous().Reshape({-1}), rstd.Contiguous().Reshape({-1}),
                                    residual_grad.defined() ? residual_grad.Contiguous().Reshape(rows) : Tensor(),
                                    g.dx.Reshape(rows), g.dweight, g.dbias);
  return g;
}

Tensor Gelu(const Tensor& x) {
  const char* op = "Gelu";
  check::Args args = {{"x", &x}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOrBf16(op, args);
  Tensor y = Tensor::Empty(x.shape(), dt, d);
  if (y.numel() > 0) NnKernelsFor(d).Gelu(x.Contiguous(), y);
  return y;
}

Tensor GeluBackward(const Tensor& grad, const Tensor& x) {
  const char* op = "GeluBackward";
  check::Args args = {{"grad", &grad}, {"x", &x}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOrBf16Operand(op, args, {"x", &x});
  CheckOutDType(op, args, dt, check::FloatOrBf16Operand(op, args, {"grad", &grad}));
  check::SameShape(op, args);
  Tensor dx = Tensor::Empty(x.shape(), dt, d);
  if (dx.numel() > 0) NnKernelsFor(d).GeluBackward(grad.Contiguous(), x.Contiguous(), dx);
  return dx;
}

Tensor CausalSoftmax(const Tensor& scores, double scale) {
  const char* op = "CausalSoftmax";
  check::Args args = {{"scores", &scores}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOrBf16(op, args);
  CheckSquareScores(op, args, scores, "scores");
  CheckScale(op, args, scale);
  Tensor y = Tensor::Empty(scores.shape(), dt, d);
  if (y.numel() > 0) {
    const Shape rows = {-1, scores.size(-1)};
    NnKernelsFor(d).CausalSoftmax(scores.Contiguous().Reshape(rows), scale, y.Reshape(rows));
  }
  return y;
}

Tensor CausalSoftmaxBackward(const Tensor& grad, const Tensor& probs, double scale) {
  const char* op = "CausalSoftmaxBackward";
  check::Args args = {{"grad", &grad}, {"probs", &probs}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOrBf16(op, args);
  check::SameShape(op, args);
  CheckSquareScores(op, args, probs, "probs");
  CheckScale(op, args, scale);
  Tensor dx = Tensor::Empty(probs.shape(), dt, d);
  if (dx.numel() > 0) {
    const Shape rows = {-1, probs.size(-1)};
    NnKernelsFor(d).CausalSoftmaxBackward(grad.Contiguous().Reshape(rows), probs.Contiguous().Reshape(rows), scale,
                                          dx.Reshape(rows));
  }
  return dx;
}

}  // namespace psync::ops
