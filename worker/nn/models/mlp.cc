#include "worker/nn/models/mlp.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/logging.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/view_functions.h"
#include "psync/nn/init.h"

namespace psync::nn {

MLP::MLP(const std::vector<int64_t>& widths, Device device, uint64_t seed) {
  PSYNC_CHECK(widths.size() >= 2) << "MLP needs at least an input and an output width";
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    layers_.push_back(RegisterModule(absl::StrCat("layers.", i),
                                     std::make_shared<Linear>(widths[i], widths[i + 1], device, DeriveSeed(seed, i))));
  }
}

absl::Status MLP::ValidateSkip(const std::set<int>& skip_layers) const {
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
    absl::Status st = ValidateSkip(skip_layers);
    if (!st.ok()) throw TensorError(std::string(st.message()));
  }
  Variable h = x.data().dim() > 2 ? autograd::Reshape(x, {x.data().size(0), -1}) : x;
  for (int i = 0; i < num_layers(); ++i) {
    if (skip_layers.count(i)) continue;
    h = (*layers_[static_cast<size_t>(i)])(h);
    if (i + 1 < num_layers()) h = autograd::Relu(h);
  }
  // The loss (MSE or cross-entropy, autocast's float32 list) in float32.
  return x.data().dtype() == kFloat32 ? autograd::Cast(h, kFloat32) : h;
}

std::vector<std::pair<std::string, Variable>> MLP::MatmulWeights() const {
  std::vector<std::pair<std::string, Variable>> out;
  for (const auto& l : layers_) out.emplace_back(l->weight().name(), l->weight());
  return out;
}

std::string MLP::Describe() const {
  std::vector<int64_t> widths;
  for (const auto& l : layers_) widths.push_back(l->in_features());
  if (!layers_.empty()) widths.push_back(layers_.back()->out_features());
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.data().numel();
  return absl::StrCat("mlp ", absl::StrJoin(widths, ","), " (", n, " parameters)");
}

}  // namespace psync::nn
