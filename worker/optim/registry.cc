#include "psync/optim/registry.h"

#include <memory>

#include "psync/optim/adamw.h"
#include "psync/optim/sgd.h"

namespace psync::optim {

namespace {
template <typename T>
absl::StatusOr<std::unique_ptr<Optimizer>> Make(const OptimizerArgs& args) {
  if (absl::Status st = Optimizer::ValidateParams(args.params); !st.ok()) return st;
  if (absl::Status st = T::ValidateOptions(args.options); !st.ok()) return st;
  return std::unique_ptr<Optimizer>(std::make_unique<T>(args.params, args.options));
}
}  // namespace

const Registry<Optimizer, OptimizerArgs>& Optimizers() {
  static const Registry<Optimizer, OptimizerArgs>* registry = [] {
    auto* r = new Registry<Optimizer, OptimizerArgs>("optimizer");
    r->Add("sgd", "torch.optim.SGD: --lr, --momentum, --weight-decay (L2 on every parameter)", Make<SGD>);
    r->Add("adamw",
           "torch.optim.AdamW: --lr, --beta1, --beta2, --eps, --weight-decay (decoupled, parameters with >= 2 dims)",
           Make<AdamW>);
    return r;
  }();
  return *registry;
}

}  // namespace psync::optim
