// DistributedDataParallel: wraps a module so that backward averages its
// gradients over the process group (see reducer.h for the mechanics).
//
//   auto pg = comm::CreateProcessGroup("gloo", store, rank, world, {...});
//   PSYNC_ASSIGN_OR_RETURN(auto ddp, ddp::DistributedDataParallel::Create(model, std::move(*pg), options));
//   optim::SGD sgd(model->named_parameters(), {});
//   for (...) {
//     PSYNC_ASSIGN_OR_RETURN(Variable y, ddp->Forward(x));   // or Forward([&] { return mlp->Forward(x, skip); })
//     PSYNC_RETURN_IF_ERROR(autograd::Backward(nn::MseLoss(y, target)));  // finalize runs at its end
//     PSYNC_RETURN_IF_ERROR(sgd.Step(/*lr=*/0.1));
//     sgd.ZeroGrad();
//   }
//
// Construction checks that every rank reduces the same way (--zero, the
// comm hook: a mismatch is InvalidArgument naming both ranks) and broadcasts
// rank 0's parameters (so every replica starts the same). Gradients are always views into the buckets
// (gradient_as_bucket_view): ZeroGrad(set_to_none=false) zeroes them in
// place, set_to_none drops them and the next backward copies them in again.
// With --zero=1|2|3 the averaged gradients live in this rank's shards
// between a synchronised backward and the optimizer's step, and a second
// synchronised backward before the step replaces them (plain DDP, like
// PyTorch's, adds to them): accumulate micro-batches under NoSync.
//
// Threads: Create, Forward, NoSync and the getters run on the training
// thread (the thread that calls backward).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "psync/comm/process_group.h"
#include "psync/ddp/no_sync.h"
#include "psync/ddp/reducer_options.h"
#include "psync/ddp/unused_parameter_source.h"
#include "psync/nn/module.h"

namespace psync::ddp {

class Reducer;  // worker/ddp/reducer.h: the mechanics, private to psync

// Everything the reducer takes (reducer.h: bucket_caps, find_unused_parameters,
// timeout, rebuild, comm_hook, check_in_step, zero_stage, zero3_prefetch,
// reshard_after_forward; with --zero=1|2|3 the sharded optimizer must be
// attached to reducer().zero_buckets(); --zero=3 sets the module's forward
// hooks (psync/nn/module.h), so a module must call its children through
// Module::operator() or a ForwardScope, and every rank must run the same
// modules in the same order, as with PyTorch FSDP), plus
// what only the wrapper does. One struct, so the reducer's options are
// passed on as they are, never copied field by field.
struct DdpOptions : ReducerOptions {
  // Always on: gradients are views into the bucket buffers. (Kept as a
  // field so the option set reads like PyTorch's; false is rejected.)
  bool gradient_as_bucket_view = true;
  // Broadcast rank 0's parameters at construction.
  bool broadcast_parameters = true;
};

class DistributedDataParallel {
 public:
  // `source`: global unused-parameter sets (the coordinator's); null = an
  // allreduce over `group`.
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Create(
      std::shared_ptr<nn::Module> module, std::shared_ptr<comm::ProcessGroup> group, DdpOptions options = {},
      std::shared_ptr<UnusedParameterSource> source = nullptr);
  ~DistributedDataParallel();

  // module->Forward(x), then reducer().PrepareForBackward({y}). Fails
  // (before running forward) when the previous backward left reduction
  // unfinished; tensor errors come back as InvalidArgument.
  absl::StatusOr<autograd::Variable> Forward(const autograd::Variable& x);
  // Same with any forward computation over the wrapped module's parameters
  // (e.g. [&] { return mlp->Forward(x, skip_layers); }).
  absl::StatusOr<autograd::Variable> Forward(const std::function<autograd::Variable()>& forward);
  // Several outputs: every one should take part in the loss, unless
  // find_unused_parameters is on.
  absl::StatusOr<std::vector<autograd::Variable>> ForwardMany(
      const std::function<std::vector<autograd::Variable>()>& forward);

  // Live recovery: goes on with `group`, a process group of the new
  // membership, formed in this process after the old one failed (a peer
  // was lost; comm::CreateProcessGroup under a fresh store prefix). The
  // interrupted step's gradients are dropped (compute that step again, over
  // the new membership), the buckets keep their layout on the new group.
  // Parameters and optimizer state are not touched: they must already be
  // the same on every member (a rank that fell behind is healed first).
  // Call on the training thread, after the failed backward returned and
  // outside NoSync. FailedPrecondition with --zero (a lost rank's shard of
  // the optimizer state is gone with it: resume from a checkpoint).
  absl::Status Rejoin(std::shared_ptr<comm::ProcessGroup> group);

  // Scoped no_sync; see no_sync.h.
  ddp::NoSync NoSync() { return ddp::NoSync(*reducer_); }

  nn::Module& module() const { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  Reducer& reducer() const { return *reducer_; }
  comm::ProcessGroup& group() const { return *group_; }
  const DdpOptions& options() const { return options_; }

 private:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<comm::ProcessGroup> group,
                          DdpOptions options, std::unique_ptr<Reducer> reducer);

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<comm::ProcessGroup> group_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
};

// Copies rank 0's values of `params` into every rank's (one flat broadcast
// per device). Used by DistributedDataParallel::Create.
absl::Status BroadcastParameters(const std::vector<autograd::Variable>& params, comm::ProcessGroup& group,
                                 std::chrono::milliseconds timeout);

}  // namespace psync::ddp
