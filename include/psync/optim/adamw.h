// AdamW with PyTorch semantics: torch.optim.AdamW (amsgrad off), as its
// single-tensor path (foreach=False) computes it, per parameter p whose grad
// g is defined, in one fused pass (ops::AdamWUpdate, rounding as torch's
// kernels, so float32 results equal torch's bit for bit):
//   step += 1                                  (this parameter's own count)
//   p *= 1 - lr * weight_decay                 (decoupled; only for p with >= 2 dims)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// A parameter whose grad is undefined is untouched: no decay, no moment
// update, and its step count does not advance (as in torch, where it is
// skipped). The grad is only read (it may be a view into a DDP bucket).
// State: "<param>.step", "<param>.exp_avg", "<param>.exp_avg_sq".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "psync/optim/optimizer.h"
#include "psync/optim/update_rule.h"

namespace psync::optim {

class AdamW final : public Optimizer {
 public:
  // Expects valid input (Optimizer::ValidateParams, AdamW::ValidateOptions);
  // the registry checks both and names the bad parameter or flag.
  AdamW(NamedParams params, const OptimizerOptions& options);
  static absl::Status ValidateOptions(const OptimizerOptions& options);

  std::string name() const override { return "adamw"; }
  absl::Status Step(double lr) override;

  // Whether weight decay applies to parameter i (it has >= 2 dimensions).
  bool decays(size_t i) const { return params_[i].second.data().dim() >= 2; }

 protected:
  std::vector<std::pair<std::string, Tensor>> StateBuffers(size_t i) const override;

 private:
  AdamWRule rule_;  // the update (update_rule.h), shared with the sharded optimizer
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // m and v per parameter, zeros until its first step
};

}  // namespace psync::optim
