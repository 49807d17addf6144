#include "worker/nn/sgd.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "worker/tensor/ops.h"

namespace psync::nn {

SGD::SGD(std::vector<autograd::Variable> params, float lr, float momentum, float weight_decay)
    : params_(std::move(params)), buffers_(params_.size()), lr_(lr), momentum_(momentum), weight_decay_(weight_decay) {}

absl::Status SGD::Step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const autograd::Variable& p = params_[i];
    if (!p.grad().defined()) continue;
    try {
      Tensor d = p.grad();
      if (weight_decay_ != 0.0f) {
        d = d.Clone();  // never modify the grad: it may be a view into a bucket
        ops::Axpy(weight_decay_, p.data(), d);
      }
      if (momentum_ != 0.0f) {
        Tensor& buf = buffers_[i];
        if (!buf.defined()) {
          buf = d.Clone();
        } else {
          ops::ScaleInPlace(buf, momentum_);
          ops::AddInPlace(buf, d);
        }
        d = buf;
      }
      ops::Axpy(-lr_, d, p.mutable_data());
    } catch (const TensorError& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("SGD step on parameter '", p.name(), "' (index ", i, "): ", e.what()));
    } catch (const InternalError& e) {
      return absl::InternalError(absl::StrCat("SGD step on parameter '", p.name(), "' (index ", i, "): ", e.what()));
    }
  }
  return absl::OkStatus();
}

void SGD::ZeroGrad(bool set_to_none) {
  for (const autograd::Variable& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      Tensor g = p.grad();
      ops::Fill(g, 0.0f);
    }
  }
}

}  // namespace psync::nn
