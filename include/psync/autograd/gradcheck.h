// GradCheck: a finite-difference check of a differentiable function (like
// torch.autograd.gradcheck), for ops and custom functions written outside
// psync (function_node.h shows how to write one):
//
//   absl::Status st = psync::autograd::GradCheck(
//       [](const std::vector<Variable>& v) { return MyRmsNorm(v[0], v[1]); },
//       {RandomDouble({4, 8}, 1), RandomDouble({8}, 2)});
//
// It runs in float64 on the CPU. The function's output y (any shape) is
// reduced to L = sum(w * y) with a fixed random w, so every output element
// matters. The engine's dL/dx for every float64 input is compared, element
// by element, with (L(x + eps) - L(x - eps)) / (2 eps). Inputs of other
// dtypes (indices, targets) and `constant_inputs` pass through as constants.
// OK when every element agrees within atol + rtol * |numeric|; otherwise
// InvalidArgument naming the input, the element and both values.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "psync/autograd/variable.h"
#include "psync/tensor/tensor.h"

namespace psync::autograd {

using GradFn = std::function<Variable(const std::vector<Variable>&)>;

struct GradCheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  // Inputs (by position) that get no gradient check (they still flow).
  std::vector<size_t> constant_inputs = {};
};

absl::Status GradCheck(const GradFn& fn, const std::vector<Tensor>& inputs, const GradCheckOptions& options = {});

// Uniform values in [lo, hi), float64, deterministic in `seed`.
Tensor RandomDouble(const Shape& shape, uint32_t seed, double lo = -1.0, double hi = 1.0);

}  // namespace psync::autograd
