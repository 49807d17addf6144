#include "psync/optim/sgd.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "psync/tensor/ops.h"

namespace psync::optim {

SGD::SGD(NamedParams params, const OptimizerOptions& options)
    : Optimizer(std::move(params)), momentum_(options.momentum), weight_decay_(options.weight_decay), rule_(options) {
  if (momentum_ != 0) {
    for (const auto& [name, p] : params_) {
      buffers_.push_back(Tensor::Zeros(p.data().shape(), p.data().dtype(), p.data().device()));
    }
  }
}

absl::Status SGD::ValidateOptions(const OptimizerOptions& o) {
  if (!(o.momentum >= 0 && std::isfinite(o.momentum))) {
    return absl::InvalidArgumentError(absl::StrCat("--momentum must be a finite value >= 0, got ", o.momentum));
  }
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight-decay must be a finite value >= 0, got ", o.weight_decay));
  }
  return absl::OkStatus();
}

absl::Status SGD::Step(double lr) {
  return ForEachWithGrad([&](size_t i) {
    const autograd::Variable& p = params_[i].second;
    std::vector<Tensor> state;
    if (momentum_ != 0) state.push_back(buffers_[i]);
    rule_.Apply(p.data(), p.grad(), state, ParamStep{p.data().dim(), steps_[i]}, lr, weight_copy(i));
  });
}

std::vector<std::pair<std::string, Tensor>> SGD::StateBuffers(size_t i) const {
  if (momentum_ == 0) return {};
  return {{"momentum_buffer", buffers_[i]}};
}

}  // namespace psync::optim
