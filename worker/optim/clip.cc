#include "psync/optim/clip.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "psync/tensor/ops.h"

namespace psync::optim {

namespace {

absl::Status ParamError(const std::string& name, size_t i, const std::exception& e) {
  return absl::InvalidArgumentError(absl::StrCat("gradient norm: parameter '", name, "' (index ", i, "): ", e.what()));
}

// Sums of squares of the defined grads, in parameter order (all queued on
// the grads' device, then one copy to the host).
absl::StatusOr<double> Norm(const NamedParams& params) {
  std::vector<size_t> with_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].second.grad().defined()) with_grad.push_back(i);
  }
  if (with_grad.empty()) return 0.0;
  const Device device = params[with_grad[0]].second.grad().device();
  Tensor sums;
  try {
    sums = Tensor::Empty({static_cast<int64_t>(with_grad.size())}, kFloat64, device);
  } catch (const TensorError& e) {
    return ParamError(params[with_grad[0]].first, with_grad[0], e);
  }
  for (size_t k = 0; k < with_grad.size(); ++k) {
    const auto& [name, p] = params[with_grad[k]];
    if (p.grad().device() != device) {
      return absl::InvalidArgumentError(absl::StrCat("gradient norm: parameter '", name, "' (index ", with_grad[k],
                                                     ") has its grad on ", p.grad().device().ToString(),
                                                     ", the others on ", device.ToString()));
    }
    try {
      ops::SumOfSquaresInto(sums.View(static_cast<int64_t>(k), {}), p.grad());
    } catch (const TensorError& e) {
      return ParamError(name, with_grad[k], e);
    }
  }
  std::vector<double> host;
  try {
    host = sums.ToVector<double>();
  } catch (const TensorError& e) {
    return absl::InternalError(absl::StrCat("gradient norm: reading the sums of squares: ", e.what()));
  }
  double total = 0.0;
  for (double s : host) total += s;
  return std::sqrt(total);
}

}  // namespace

absl::StatusOr<double> GradNorm(const NamedParams& params) { return Norm(params); }

absl::StatusOr<double> ClipGradNorm(const NamedParams& params, double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(max_norm)) {
    return absl::InvalidArgumentError(absl::StrCat("--clip-grad-norm must be a finite value > 0, got ", max_norm));
  }
  absl::StatusOr<double> norm = Norm(params);
  if (!norm.ok()) return norm.status();
  const double coef = max_norm / (*norm + 1e-6);
  // A NaN/inf norm gives coef 0 or NaN and poisons the grads, as in torch
  // (error_if_nonfinite=False): the loss shows it the next step.
  if (!(coef < 1.0) && !std::isnan(coef)) return *norm;
  const float scale = static_cast<float>(coef);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    if (!p.grad().defined()) continue;
    try {
      ops::ScaleInPlace(p.grad(), scale);
    } catch (const TensorError& e) {
      return ParamError(name, i, e);
    }
  }
  return *norm;
}

}  // namespace psync::optim
