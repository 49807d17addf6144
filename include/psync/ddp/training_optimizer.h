// The optimizer of a data-parallel run, one shape for psync-worker and the
// benchmarks, in two steps around DistributedDataParallel's construction:
//
//   MakeOptimizer   before DDP: the whole-parameter optimizer `name`
//                   (optim/registry.h), which writes the bf16 weight copies
//                   in its step; with `zero_stage` > 0 the same update rule
//                   over this rank's shards (optim::ShardedOptimizer),
//                   not attached yet (--resume may load its state first)
//   AttachOptimizer after DDP: --zero's optimizer gets the shards DDP's
//                   buckets hand it, and with bf16 the copies are rewritten
//                   after each parameter gather (ZeroBuckets::SetAfterGather),
//                   since each rank updates only its shard; nothing to do
//                   for the whole-parameter optimizer
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/ddp/ddp.h"
#include "psync/nn/precision.h"
#include "psync/optim/optimizer.h"

namespace psync::ddp {

absl::StatusOr<std::unique_ptr<optim::Optimizer>> MakeOptimizer(const std::string& name,
                                                                const optim::OptimizerOptions& options,
                                                                const optim::NamedParams& params,
                                                                const nn::PrecisionPolicy& precision, int zero_stage);

// `precision`: the model's policy (null = float32).
absl::Status AttachOptimizer(optim::Optimizer& optimizer, DistributedDataParallel& ddp,
                             std::shared_ptr<const nn::PrecisionPolicy> precision = nullptr);

}  // namespace psync::ddp
