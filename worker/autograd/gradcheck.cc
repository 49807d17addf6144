#include "psync/autograd/gradcheck.h"

#include <cmath>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/common/status_from_exception.h"

namespace psync::autograd {

Tensor RandomDouble(const Shape& shape, uint32_t seed, double lo, double hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(NumelOf(shape)));
  for (double& x : v) x = dist(gen);
  return Tensor::FromVector(v, shape);
}

namespace {

absl::Status Check(const GradFn& fn, const std::vector<Tensor>& inputs, const GradCheckOptions& opt) {
  auto is_checked = [&](size_t i) {
    for (size_t c : opt.constant_inputs) {
      if (c == i) return false;
    }
    return inputs[i].dtype() == kFloat64;
  };
  std::vector<Tensor> values;
  for (const Tensor& t : inputs) values.push_back(t.Clone());
  auto make_vars = [&](bool grad) {
    std::vector<Variable> vars;
    for (size_t i = 0; i < values.size(); ++i) {
      vars.emplace_back(values[i], grad && is_checked(i), absl::StrCat("input", i));
    }
    return vars;
  };

  // The weighting w, fixed by the output's shape.
  std::vector<Variable> vars = make_vars(true);
  Variable y = fn(vars);
  if (y.data().dtype() != kFloat64) {
    return absl::InvalidArgumentError(
        absl::StrCat("GradCheck: the function returned ", y.data().DebugString(), "; GradCheck runs in float64"));
  }
  const Tensor w = RandomDouble(y.shape(), 12345, 0.5, 1.5);
  auto loss_of = [&](const Variable& out) { return Sum(Mul(out, Variable(w))); };
  if (absl::Status st = Backward(loss_of(y)); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("GradCheck: backward failed: ", st.message()));
  }
  auto loss_value = [&]() { return loss_of(fn(make_vars(false))).data().Item<double>(); };
  for (size_t i = 0; i < values.size(); ++i) {
    if (!is_checked(i)) continue;
    const Tensor& grad = vars[i].grad();
    if (!grad.defined()) return absl::InvalidArgumentError(absl::StrCat("GradCheck: input ", i, " got no gradient"));
    const std::vector<double> analytic = grad.ToVector<double>();
    double* x = values[i].data<double>();
    for (int64_t j = 0; j < values[i].numel(); ++j) {
      const double saved = x[j];
      x[j] = saved + opt.eps;
      const double plus = loss_value();
      x[j] = saved - opt.eps;
      const double minus = loss_value();
      x[j] = saved;
      const double numeric = (plus - minus) / (2 * opt.eps);
      const double tol = opt.atol + opt.rtol * std::fabs(numeric);
      const double a = analytic[static_cast<size_t>(j)];
      if (!(std::fabs(a - numeric) <= tol)) {
        return absl::InvalidArgumentError(absl::StrCat("GradCheck: input ", i, " ", values[i].DebugString(),
                                                       " element ", j, ": analytic ", a, " vs numeric ", numeric,
                                                       " (tolerance ", tol, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GradCheck(const GradFn& fn, const std::vector<Tensor>& inputs, const GradCheckOptions& options) {
  try {
    return Check(fn, inputs, options);
  } catch (...) {
    return StatusFromException("GradCheck");
  }
}

}  // namespace psync::autograd
