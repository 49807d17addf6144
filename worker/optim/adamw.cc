#include "psync/optim/adamw.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "psync/tensor/ops.h"

namespace psync::optim {

AdamW::AdamW(NamedParams params, const OptimizerOptions& options)
    : Optimizer(std::move(params)), rule_(options) {
  for (const auto& [name, p] : params_) {
    const Tensor& d = p.data();
    exp_avg_.push_back(Tensor::Zeros(d.shape(), d.dtype(), d.device()));
    exp_avg_sq_.push_back(Tensor::Zeros(d.shape(), d.dtype(), d.device()));
  }
}

absl::Status AdamW::ValidateOptions(const OptimizerOptions& o) {
  // torch.optim.AdamW's own checks.
  auto in01 = [](double b) { return b >= 0 && b < 1; };
  if (!in01(o.beta1)) return absl::InvalidArgumentError(absl::StrCat("--beta1 must be in [0, 1), got ", o.beta1));
  if (!in01(o.beta2)) return absl::InvalidArgumentError(absl::StrCat("--beta2 must be in [0, 1), got ", o.beta2));
  if (!(o.eps >= 0 && std::isfinite(o.eps))) {
    return absl::InvalidArgumentError(absl::StrCat("--eps must be a finite value >= 0, got ", o.eps));
  }
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight-decay must be a finite value >= 0, got ", o.weight_decay));
  }
  return absl::OkStatus();
}

absl::Status AdamW::Step(double lr) {
  // Every parameter with a grad is checked (an error names it), then all are
  // updated at once: one multi-tensor launch on CUDA, a loop on the CPU.
  std::vector<ops::AdamWParam> batch;
  std::vector<size_t> index;
  absl::Status st = ForEachWithGrad([&](size_t i) {
    const autograd::Variable& p = params_[i].second;
    ops::AdamWParam a =
        rule_.Operands(p.data(), p.grad(), {exp_avg_[i], exp_avg_sq_[i]}, ParamStep{p.data().dim(), steps_[i]}, lr,
                       weight_copy(i));
    ops::CheckAdamWParam(a);
    batch.push_back(std::move(a));
    index.push_back(i);
  });
  if (!st.ok()) return st;
  try {
    ops::AdamWUpdateMany(batch);
  } catch (const TensorError& e) {
    return ParamError(index.empty() ? 0 : index.front(), e, /*internal=*/false);
  } catch (const InternalError& e) {
    return ParamError(index.empty() ? 0 : index.front(), e, /*internal=*/true);
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, Tensor>> AdamW::StateBuffers(size_t i) const {
  return {{"exp_avg", exp_avg_[i]}, {"exp_avg_sq", exp_avg_sq_[i]}};
}

}  // namespace psync::optim
