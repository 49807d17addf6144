// GradCheck: a finite-difference check of a differentiable function, run
// with the real ops in float64 on the CPU (like torch.autograd.gradcheck).
//
//   EXPECT_TRUE(GradCheck([](const std::vector<Variable>& v) { return Gelu(v[0]); },
//                         {RandomDouble({4, 8}, 1)}));
//
// The function's output y (any shape) is reduced to L = sum(w * y) with a
// fixed random w, so every output element matters. The engine's dL/dx for
// every floating input that requires grad is compared, element by element,
// with (L(x + eps) - L(x - eps)) / (2 eps). Inputs that are int64 (indices,
// targets) are passed through as constants. A function may take Tensors it
// captured itself, too.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/functions.h"
#include "worker/tensor/ops.h"

namespace psync::autograd::testing {

using GradFn = std::function<Variable(const std::vector<Variable>&)>;

// Uniform values in [lo, hi), float64, deterministic.
inline Tensor RandomDouble(const Shape& shape, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(NumelOf(shape)));
  for (double& x : v) x = dist(gen);
  return Tensor::FromVector(v, shape);
}

struct GradCheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  // Inputs (by position) that get no gradient check (they still flow).
  std::vector<size_t> constant_inputs = {};
};

inline ::testing::AssertionResult GradCheck(const GradFn& fn, const std::vector<Tensor>& inputs,
                                            GradCheckOptions opt = {}) {
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
    return ::testing::AssertionFailure() << "the function returned " << y.data().DebugString()
                                         << "; GradCheck runs in float64";
  }
  const Tensor w = RandomDouble(y.shape(), 12345, 0.5, 1.5);
  auto loss_of = [&](const Variable& out) { return Sum(Mul(out, Variable(w))); };
  absl::Status st = Backward(loss_of(y));
  if (!st.ok()) return ::testing::AssertionFailure() << "backward failed: " << st;

  auto loss_value = [&]() {
    return loss_of(fn(make_vars(false))).data().Item<double>();
  };
  for (size_t i = 0; i < values.size(); ++i) {
    if (!is_checked(i)) continue;
    const Tensor& grad = vars[i].grad();
    if (!grad.defined()) return ::testing::AssertionFailure() << "input " << i << " got no gradient";
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
      if (!(std::fabs(analytic[static_cast<size_t>(j)] - numeric) <= tol)) {
        return ::testing::AssertionFailure() << "input " << i << " " << values[i].DebugString() << " element " << j
                                             << ": analytic " << analytic[static_cast<size_t>(j)] << " vs numeric "
                                             << numeric << " (tolerance " << tol << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace psync::autograd::testing
