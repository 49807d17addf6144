// Layers: Linear, ReLU and the MLP used for training and tests.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "worker/nn/module.h"
#include "worker/tensor/device.h"

namespace psync::nn {

// y = x W^T + b, W [out,in], b [out]. Both initialised from
// U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's default bounds) with SplitMix64(seed):
// weight values first (row-major), then bias.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Device device = Device::CPU(), uint64_t seed = 0);
  Variable Forward(const Variable& x) override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  const Parameter& weight() const { return weight_; }
  const Parameter& bias() const { return bias_; }

 private:
  int64_t in_, out_;
  Parameter weight_, bias_;
};

class ReLU : public Module {
 public:
  Variable Forward(const Variable& x) override;
};

// widths {w0, w1, ..., wn}: n Linear layers "layers.{i}" (w_i -> w_{i+1},
// seeded with DeriveSeed(seed, i)), a ReLU after every layer but the last.
class MLP : public Module {
 public:
  MLP(const std::vector<int64_t>& widths, Device device = Device::CPU(), uint64_t seed = 0);

  Variable Forward(const Variable& x) override { return Forward(x, {}); }
  // Layer drop: every layer in `skip_layers` is bypassed, its Linear and its
  // ReLU, so its parameters get no gradient (the unused-parameter case).
  // Throws psync::TensorError when ValidateSkipLayers fails.
  Variable Forward(const Variable& x, const std::set<int>& skip_layers);
  // OK when every index is a layer that is square (in == out) and not the last.
  absl::Status ValidateSkipLayers(const std::set<int>& skip_layers) const;

  int num_layers() const { return static_cast<int>(layers_.size()); }
  const Linear& layer(int i) const { return *layers_[static_cast<size_t>(i)]; }

 private:
  std::vector<std::shared_ptr<Linear>> layers_;
};

}  // namespace psync::nn
