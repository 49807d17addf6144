// MLP: Linear layers with a ReLU after every layer but the last.
//
// widths {w0, w1, ..., wn}: n Linear layers "layers.{i}" (w_i -> w_{i+1},
// seeded with DeriveSeed(seed, i)). Inputs with more than two dims (images
// [b, C, H, W]) are flattened to [b, C*H*W] first, so w0 = C*H*W.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "psync/nn/layers.h"
#include "psync/nn/models/model.h"

namespace psync::nn {

class MLP : public Model {
 public:
  MLP(const std::vector<int64_t>& widths, Device device = Device::CPU(), uint64_t seed = 0);

  using Model::Forward;
  // Layer drop: every layer in `skip_layers` is bypassed, its Linear and its
  // ReLU, so its parameters get no gradient (the unused-parameter case).
  // Throws psync::TensorError when ValidateSkip fails.
  Variable Forward(const Variable& x, const std::set<int>& skip_layers) override;
  // OK when every index is a layer that is square (in == out) and not the last.
  absl::Status ValidateSkip(const std::set<int>& skip_layers) const override;
  std::string Describe() const override;
  // Every layer's weight. In a bf16 step the layers compute in bfloat16 and
  // the output is cast back to float32 for the loss.
  std::vector<std::pair<std::string, Variable>> MatmulWeights() const override;

  int num_layers() const { return static_cast<int>(layers_.size()); }
  const Linear& layer(int i) const { return *layers_[static_cast<size_t>(i)]; }

 private:
  std::vector<std::shared_ptr<Linear>> layers_;
};

}  // namespace psync::nn
