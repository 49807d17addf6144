// Layers models are built from: Linear, ReLU (LayerNorm and Embedding have
// files of their own).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "psync/nn/module.h"
#include "psync/tensor/device.h"

namespace psync::nn {

// y = x W^T + b, W [out,in], b [out]. Both initialised from
// U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's default bounds) with SplitMix64(seed):
// weight values first (row-major), then bias.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Device device = Device::CPU(), uint64_t seed = 0);
  // Given values: weight [out, in]; bias [out], or undefined for no bias.
  Linear(Tensor weight, Tensor bias);
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

}  // namespace psync::nn
