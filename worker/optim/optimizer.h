// Optimizer: updates parameters from their (averaged) gradients. One
// interface, one implementation per algorithm, chosen by --optimizer through
// the registry in optim/registry.h (sgd, adamw).
//
// Semantics follow PyTorch: a parameter whose grad is undefined in a step
// (unused on every rank) is left untouched: no decay, no moment update, and
// its own step count (for bias correction) does not advance.
//
// Threads: the training thread only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/autograd/variable.h"

namespace psync::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct OptimizerOptions {
  double lr = 0.05;            // the peak learning rate; the schedule scales it per step
  double momentum = 0;         // sgd
  double weight_decay = 0;     // sgd: L2 added to the gradient; adamw: decoupled, p *= 1 - lr*wd
  double beta1 = 0.9;          // adamw
  double beta2 = 0.95;
  double eps = 1e-8;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // One update of every parameter with a defined grad, at learning rate
  // `lr` (the schedule's value for this step). Tensor errors come back as
  // InvalidArgument naming the parameter.
  virtual absl::Status Step(double lr) = 0;
  // Clears every parameter's grad (set_to_none) or zeroes it in place (so
  // grads that are DDP bucket views stay views).
  void ZeroGrad(bool set_to_none = true);

  // The whole state (moments, buffers, per-parameter step counts) as named
  // tensors, for checkpoints; LoadState restores it exactly (same bits) or
  // changes nothing and says which entry is missing or mis-shaped.
  virtual NamedTensors State() const = 0;
  virtual absl::Status LoadState(const NamedTensors& state) = 0;

  // (name, parameter) in registration order.
  const std::vector<std::pair<std::string, autograd::Variable>>& params() const { return params_; }

 protected:
  explicit Optimizer(std::vector<std::pair<std::string, autograd::Variable>> params) : params_(std::move(params)) {}
  std::vector<std::pair<std::string, autograd::Variable>> params_;
};

}  // namespace psync::optim
