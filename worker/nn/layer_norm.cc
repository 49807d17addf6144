#include "psync/nn/layer_norm.h"

#include "psync/common/logging.h"
#include "psync/autograd/nn_functions.h"
#include "psync/nn/precision.h"

namespace psync::nn {

LayerNorm::LayerNorm(int64_t features, Device device, double eps) : eps_(eps) {
  PSYNC_CHECK(features > 0) << "LayerNorm(" << features << ")";
  weight_ = RegisterParameter("weight", Tensor::Full({features}, 1.0f, device));
  bias_ = RegisterParameter("bias", Tensor::Zeros({features}, device));
}

Variable LayerNorm::Forward(const Variable& x) {
  return autograd::LayerNorm(x, weight_, bias_, eps_, precision().OutputDType(x.data().dtype()));
}

std::pair<Variable, Variable> LayerNorm::ForwardResidual(const Variable& x, const Variable& a) {
  ForwardScope scope(*this);
  auto out = autograd::ResidualLayerNorm(x, a, weight_, bias_, eps_, precision().OutputDType(x.data().dtype()));
  scope.Done({out.first, out.second});
  return out;
}

}  // namespace psync::nn
