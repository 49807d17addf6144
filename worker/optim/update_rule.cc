#include "worker/optim/update_rule.h"

#include "worker/optim/adamw.h"
#include "worker/optim/sgd.h"
#include "worker/tensor/ops.h"

namespace psync::optim {

void AdamWRule::Apply(const Tensor& p, const Tensor& g, const std::vector<Tensor>& buffers, const ParamStep& info,
                      double lr) const {
  ops::AdamWStep h;
  h.lr = lr;
  h.beta1 = o_.beta1;
  h.beta2 = o_.beta2;
  h.eps = o_.eps;
  h.weight_decay = info.dims >= 2 ? o_.weight_decay : 0.0;
  h.step = info.step;
  ops::AdamWUpdate(p, g, buffers[0], buffers[1], h);
}

std::vector<std::string> SgdRule::buffers() const {
  if (o_.momentum == 0) return {};
  return {"momentum_buffer"};
}

void SgdRule::Apply(const Tensor& p, const Tensor& g, const std::vector<Tensor>& buffers, const ParamStep& info,
                    double lr) const {
  ops::SgdStep h;
  h.lr = lr;
  h.momentum = o_.momentum;
  h.weight_decay = o_.weight_decay;
  h.first = info.step == 1;
  ops::SgdUpdate(p, g, o_.momentum != 0 ? buffers[0] : Tensor(), h);
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
