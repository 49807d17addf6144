#include "worker/nn/layers.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "worker/autograd/functions.h"
#include "worker/nn/init.h"

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

Variable Linear::Forward(const Variable& x) { return autograd::Linear(x, weight_, bias_); }

Variable ReLU::Forward(const Variable& x) { return autograd::Relu(x); }

MLP::MLP(const std::vector<int64_t>& widths, Device device, uint64_t seed) {
  PSYNC_CHECK(widths.size() >= 2) << "MLP needs at least an input and an output width";
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    layers_.push_back(RegisterModule(absl::StrCat("layers.", i),
                                     std::make_shared<Linear>(widths[i], widths[i + 1], device, DeriveSeed(seed, i))));
  }
}

absl::Status MLP::ValidateSkipLayers(const std::set<int>& skip_layers) const {
  for (int j : skip_layers) {
    if (j < 0 || j >= num_layers()) {
      return absl::InvalidArgumentError(
          absl::StrCat("MLP: cannot skip layer ", j, ": the model has layers 0..", num_layers() - 1));
    }
    if (j == num_layers() - 1) {
      return absl::InvalidArgumentError(absl::StrCat("MLP: cannot skip layer ", j, ": it is the output layer"));
    }
    const Linear& l = layer(j);
    if (l.in_features() != l.out_features()) {
      return absl::InvalidArgumentError(absl::StrCat("MLP: cannot skip layer ", j, ": it maps ", l.in_features(),
                                                     " -> ", l.out_features(), " features; only square layers can be skipped"));
    }
  }
  return absl::OkStatus();
}

Variable MLP::Forward(const Variable& x, const std::set<int>& skip_layers) {
  if (!skip_layers.empty()) {
    absl::Status st = ValidateSkipLayers(skip_layers);
    if (!st.ok()) throw TensorError(std::string(st.message()));
  }
  Variable h = x;
  for (int i = 0; i < num_layers(); ++i) {
    if (skip_layers.count(i)) continue;
    h = layers_[static_cast<size_t>(i)]->Forward(h);
    if (i + 1 < num_layers()) h = autograd::Relu(h);
  }
  return h;
}

}  // namespace psync::nn
