// UpdateRule: an optimizer algorithm's update of one parameter's elements,
// apart from where its state lives. The whole-parameter optimizers (AdamW,
// SGD) apply it to each parameter with state of the parameter's shape; the
// sharded optimizer (sharded_optimizer.h) to the slices of parameters a rank
// owns, with state for those slices only. The updates are element-wise
// (ops::AdamWUpdate, ops::SgdUpdate), so an element gets the same bits
// either way.
//
// What an element's update depends on besides its own values is in
// ParamStep: the whole parameter's number of dimensions (AdamW decays only
// parameters with >= 2) and its step count.
//
// Threads: stateless; the training thread calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "psync/common/registry.h"
#include "psync/optim/optimizer.h"
#include "psync/tensor/ops/optim.h"
#include "psync/tensor/tensor.h"

namespace psync::optim {

struct ParamStep {
  int64_t dims = 1;  // of the whole parameter
  int64_t step = 1;  // the parameter's step count, already advanced for this step (>= 1)
};

class UpdateRule {
 public:
  virtual ~UpdateRule() = default;
  virtual std::string name() const = 0;
  // The per-element state buffers, in the order Apply takes them
  // ("exp_avg", "exp_avg_sq"; "momentum_buffer" for sgd with momentum).
  virtual std::vector<std::string> buffers() const = 0;
  // One step over `p` (contiguous), `g` (p's numel) and the buffers (p's
  // numel each, contiguous), in place; `p_copy` (undefined, or bfloat16 of
  // p's shape) gets the updated values rounded (--precision=bf16). Throws
  // TensorError.
  virtual void Apply(const Tensor& p, const Tensor& g, const std::vector<Tensor>& buffers, const ParamStep& info,
                     double lr, const Tensor& p_copy = Tensor()) const = 0;
};

class AdamWRule final : public UpdateRule {
 public:
  explicit AdamWRule(const OptimizerOptions& o) : o_(o) {}
  std::string name() const override { return "adamw"; }
  std::vector<std::string> buffers() const override { return {"exp_avg", "exp_avg_sq"}; }
  void Apply(const Tensor& p, const Tensor& g, const std::vector<Tensor>& buffers, const ParamStep& info,
             double lr, const Tensor& p_copy = Tensor()) const override;
  // Apply's operands, for ops::AdamWUpdateMany (AdamW updates every
  // parameter in one launch on CUDA).
  ops::AdamWParam Operands(const Tensor& p, const Tensor& g, const std::vector<Tensor>& buffers,
                           const ParamStep& info, double lr, const Tensor& p_copy) const;

 private:
  OptimizerOptions o_;
};

class SgdRule final : public UpdateRule {
 public:
  explicit SgdRule(const OptimizerOptions& o) : o_(o) {}
  std::string name() const override { return "sgd"; }
  std::vector<std::string> buffers() const override;
  void Apply(const Tensor& p, const Tensor& g, const std::vector<Tensor>& buffers, const ParamStep& info,
             double lr, const Tensor& p_copy = Tensor()) const override;

 private:
  OptimizerOptions o_;
};

// The rules by --optimizer name ("sgd", "adamw"); each factory validates
// the options it uses, naming the flag.
const Registry<UpdateRule, OptimizerOptions>& UpdateRules();

}  // namespace psync::optim
