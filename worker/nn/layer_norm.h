// LayerNorm over the last dim, like torch.nn.LayerNorm(C): weight [C] = 1
// and bias [C] = 0 at construction.
#pragma once

#include <cstdint>

#include "worker/nn/module.h"
#include "worker/tensor/device.h"

namespace psync::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t features, Device device = Device::CPU(), double eps = 1e-5);
  Variable Forward(const Variable& x) override;
  const Parameter& weight() const { return weight_; }
  const Parameter& bias() const { return bias_; }

 private:
  double eps_;
  Parameter weight_, bias_;
};

}  // namespace psync::nn
