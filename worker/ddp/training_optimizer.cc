#include "psync/ddp/training_optimizer.h"

#include <utility>

#include "worker/ddp/reducer.h"
#include "worker/ddp/zero_buckets.h"
#include "psync/optim/registry.h"
#include "worker/optim/sharded_optimizer.h"
#include "psync/optim/update_rule.h"

namespace psync::ddp {

absl::StatusOr<std::unique_ptr<optim::Optimizer>> MakeOptimizer(const std::string& name,
                                                                const optim::OptimizerOptions& options,
                                                                const optim::NamedParams& params,
                                                                const nn::PrecisionPolicy& precision, int zero_stage) {
  if (zero_stage == 0) {
    absl::StatusOr<std::unique_ptr<optim::Optimizer>> o = optim::Optimizers().Create(name, {params, options});
    if (!o.ok()) return o;
    // bf16: each step writes the weights' bfloat16 copies.
    if (absl::Status st = (*o)->SetWeightCopies(precision.CopiesFor(params)); !st.ok()) return st;
    return o;
  }
  absl::StatusOr<std::unique_ptr<optim::UpdateRule>> rule = optim::UpdateRules().Create(name, options);
  if (!rule.ok()) return rule.status();
  absl::StatusOr<std::unique_ptr<optim::ShardedOptimizer>> sharded =
      optim::ShardedOptimizer::Create(params, std::move(*rule));
  if (!sharded.ok()) return sharded.status();
  return std::unique_ptr<optim::Optimizer>(std::move(*sharded));
}

absl::Status AttachOptimizer(optim::Optimizer& optimizer, DistributedDataParallel& ddp,
                             std::shared_ptr<const nn::PrecisionPolicy> precision) {
  auto* sharded = dynamic_cast<optim::ShardedOptimizer*>(&optimizer);
  if (sharded == nullptr) return absl::OkStatus();
  std::shared_ptr<ZeroBuckets> zero = ddp.reducer().zero_buckets();
  if (!zero) {
    return absl::FailedPreconditionError("the sharded optimizer needs DDP built with --zero (no ZeRO buckets)");
  }
  if (absl::Status st = sharded->Attach(zero); !st.ok()) return st;
  if (precision && precision->precision() == nn::Precision::kBf16) {
    zero->SetAfterGather([precision](const std::vector<autograd::Variable>& gathered) {
      precision->RefreshCopiesOf(gathered);
    });
  }
  return absl::OkStatus();
}

}  // namespace psync::ddp
