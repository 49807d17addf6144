#include "psync/optim/update_rule.h"

#include "psync/optim/adamw.h"
#include "psync/optim/sgd.h"
#include "psync/tensor/ops.h"

namespace psync::optim {

ops::AdamWParam AdamWRule::Operands(const Tensor& p, const Tensor& g, const std::vector<Tensor>& buffers,
                                    const ParamStep& info, double lr, const Tensor& p_copy) const {
  ops::AdamWParam a;
  a.p = p;
  a.g = g;
  a.m = buffers[0];
  a.v = buffers[1];
  a.p_copy = p_copy;
  a.step.lr = lr;
  a.step.beta1 = o_.beta1;
  a.step.beta2 = o_.beta2;
  a.step.eps = o_.eps;
  a.step.weight_decay = info.dims >= 2 ? o_.weight_decay : 0.0;
  a.step.step = info.step;
  return a;
}

void AdamWRule::Apply(const Tensor& p, const Tensor& g, const std::vector<Tensor>& buffers, const ParamStep& info,
                      double lr, const Tensor& p_copy) const {
  const ops::AdamWParam a = Operands(p, g, buffers, info, lr, p_copy);
  ops::AdamWUpdate(a.p, a.g, a.m, a.v, a.step, a.p_copy);
}

std::vector<std::string> SgdRule::buffers() const {
  if (o_.momentum == 0) return {};
  return {"momentum_buffer"};
}

void SgdRule::Apply(const Tensor& p, const Tensor& g, const std::vector<Tensor>& buffers, const ParamStep& info,
                    double lr, const Tensor& p_copy) const {
  ops::SgdStep h;
  h.lr = lr;
  h.momentum = o_.momentum;
  h.weight_decay = o_.weight_decay;
  h.first = info.step == 1;
  ops::SgdUpdate(p, g, o_.momentum != 0 ? buffers[0] : Tensor(), h, p_copy);
}

namespace {
template <typename Rule, typename Optim>
absl::StatusOr<std::unique_ptr<UpdateRule>> Make(const OptimizerOptions& o) {
  if (absl::Status st = Optim::ValidateOptions(o); !st.ok()) return st;
  return std::unique_ptr<UpdateRule>(std::make_unique<Rule>(o));
}
}  // namespace

const Registry<UpdateRule, OptimizerOptions>& UpdateRules() {
  static const Registry<UpdateRule, OptimizerOptions>* registry = [] {
    auto* r = new Registry<UpdateRule, OptimizerOptions>("optimizer");
    r->Add("sgd", "torch.optim.SGD's update", Make<SgdRule, SGD>);
    r->Add("adamw", "torch.optim.AdamW's update", Make<AdamWRule, AdamW>);
    return r;
  }();
  return *registry;
}

}  // namespace psync::optim
