// SGD with PyTorch semantics (dampening 0, no Nesterov), per parameter p
// whose grad g is defined:
//   d = g + weight_decay * p
//   momentum != 0: buf = d on the parameter's first step, else
//                  buf = momentum * buf + d;   d = buf
//   p -= lr * d            (in place: the model and reducer keep their handles)
// A parameter whose grad is undefined (it got no gradient, e.g. a skipped
// layer) is not updated and its momentum buffer is left as it is.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "worker/autograd/variable.h"

namespace psync::nn {

class SGD {
 public:
  SGD(std::vector<autograd::Variable> params, float lr, float momentum = 0.0f, float weight_decay = 0.0f);

  // One update. Tensor errors (e.g. a grad on another device) come back as
  // InvalidArgument naming the parameter; parameters before it were updated.
  absl::Status Step();
  // Same as Module::ZeroGrad over this optimizer's parameters.
  void ZeroGrad(bool set_to_none = true);

  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }
  float momentum() const { return momentum_; }
  float weight_decay() const { return weight_decay_; }
  const std::vector<autograd::Variable>& params() const { return params_; }
  // Momentum buffers, one per parameter (undefined before its first step),
  // for checkpointing; assignable to restore them.
  std::vector<Tensor>& momentum_buffers() { return buffers_; }

 private:
  std::vector<autograd::Variable> params_;
  std::vector<Tensor> buffers_;
  float lr_, momentum_, weight_decay_;
};

}  // namespace psync::nn
