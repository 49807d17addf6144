// LayerNorm over the last dim, like torch.nn.LayerNorm(C): weight [C] = 1
// and bias [C] = 0 at construction. Computed in float32 (float64 in
// gradient checks); the result is stored in the precision policy's compute
// dtype (bfloat16 in a bf16 step: every LayerNorm here feeds a matmul, which
// would round it to bfloat16 anyway).
#pragma once

#include <cstdint>
#include <utility>

#include "psync/nn/module.h"
#include "psync/tensor/device.h"

namespace psync::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t features, Device device = Device::CPU(), double eps = 1e-5);
  Variable Forward(const Variable& x) override;
  // The residual add before it fused in: {h = x + a, y = LayerNorm(h)}
  // (autograd::ResidualLayerNorm), x the float32 residual stream.
  std::pair<Variable, Variable> ForwardResidual(const Variable& x, const Variable& a);
  const Parameter& weight() const { return weight_; }
  const Parameter& bias() const { return bias_; }

 private:
  double eps_;
  Parameter weight_, bias_;
};

}  // namespace psync::nn
