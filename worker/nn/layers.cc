#include "psync/nn/layers.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "psync/common/logging.h"
#include "psync/autograd/functions.h"
#include "psync/nn/init.h"
#include "psync/nn/precision.h"

namespace psync::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Device device, uint64_t seed)
    : in_(in_features), out_(out_features) {
  PSYNC_CHECK(in_features > 0 && out_features > 0) << "Linear(" << in_features << ", " << out_features << ")";
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
  SplitMix64 rng(seed);
  std::vector<float> w = UniformValues(rng, out_features * in_features, -bound, bound);
  std::vector<float> b = UniformValues(rng, out_features, -bound, bound);
  weight_ = RegisterParameter("weight", Tensor::FromVector(w, {out_features, in_features}, device));
  bias_ = RegisterParameter("bias", Tensor::FromVector(b, {out_features}, device));
}

Linear::Linear(Tensor weight, Tensor bias) {
  PSYNC_CHECK(weight.dim() == 2) << "Linear weight must be [out, in], got " << weight.DebugString();
  in_ = weight.size(1);
  out_ = weight.size(0);
  weight_ = RegisterParameter("weight", std::move(weight));
  if (bias.defined()) {
    PSYNC_CHECK(bias.shape() == Shape{out_}) << "Linear bias must be [" << out_ << "], got " << bias.DebugString();
    bias_ = RegisterParameter("bias", std::move(bias));
  }
}

Variable Linear::Forward(const Variable& x) {
  // The weight's bfloat16 copy in a bf16 step; x cast to its dtype (a no-op
  // when the layer before already produced it).
  const Tensor& w = precision().MatmulWeight(weight_);
  return autograd::Linear(autograd::Cast(x, w.dtype()), weight_, bias_, w);
}

Variable ReLU::Forward(const Variable& x) { return autograd::Relu(x); }

}  // namespace psync::nn
