// SGD with PyTorch semantics (torch.optim.SGD, dampening 0, no Nesterov),
// per parameter p whose grad g is defined, in one fused pass
// (ops::SgdUpdate, rounding as torch's kernels):
//   d = g + weight_decay * p          (every parameter, as torch's one group)
//   momentum != 0: buf = d on the parameter's first step, else
//                  buf = momentum * buf + d;   d = buf
//   p -= lr * d                       (in place: model and reducer keep their handles)
// The grad is only read (it may be a view into a DDP bucket). A parameter
// whose grad is undefined is not updated and its buffer and step count stay.
// State: "<param>.step", and "<param>.momentum_buffer" when momentum != 0.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "psync/optim/optimizer.h"
#include "psync/optim/update_rule.h"

namespace psync::optim {

class SGD final : public Optimizer {
 public:
  // Expects valid input (Optimizer::ValidateParams, SGD::ValidateOptions);
  // the registry checks both and names the bad parameter or flag.
  SGD(NamedParams params, const OptimizerOptions& options);
  static absl::Status ValidateOptions(const OptimizerOptions& options);

  std::string name() const override { return "sgd"; }
  absl::Status Step(double lr) override;

 protected:
  std::vector<std::pair<std::string, Tensor>> StateBuffers(size_t i) const override;

 private:
  double momentum_, weight_decay_;
  SgdRule rule_;  // the update (update_rule.h), shared with the sharded optimizer
  std::vector<Tensor> buffers_;  // momentum buffers (zeros until the first step); empty without momentum
};

}  // namespace psync::optim
