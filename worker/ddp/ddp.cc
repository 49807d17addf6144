#include "psync/ddp/ddp.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "psync/tensor/ops.h"
#include "worker/ddp/reducer.h"

namespace psync::ddp {
absl::Status BroadcastParameters(const std::vector<autograd::Variable>& params, comm::ProcessGroup& group,
                                 std::chrono::milliseconds timeout) {
  if (group.size() == 1) return absl::OkStatus();
  // One flat buffer per device: one collective instead of one per parameter.
  std::map<std::pair<int, int>, std::vector<size_t>> by_device;
  for (size_t i = 0; i < params.size(); ++i) {
    const Device d = params[i].data().device();
    by_device[{static_cast<int>(d.type), d.is_cpu() ? 0 : d.index}].push_back(i);
  }
  try {
    for (const auto& [key, indices] : by_device) {
      const Device device = params[indices.front()].data().device();
      int64_t total = 0;
      for (size_t i : indices) total += params[i].data().numel();
      Tensor flat = Tensor::Empty({total}, device);
      int64_t offset = 0;
      for (size_t i : indices) {
        Tensor slot = flat.View(offset, {params[i].data().numel()});
        ops::Copy(slot, params[i].data());
        offset += params[i].data().numel();
      }
      absl::Status st = group.Broadcast(flat, 0, "initial parameters")->Wait(timeout);
      if (!st.ok()) return Annotate(st, "DDP: broadcasting rank 0's parameters");
      offset = 0;
      for (size_t i : indices) {
        ops::Copy(params[i].mutable_data(), flat.View(offset, params[i].data().shape()));
        offset += params[i].data().numel();
      }
    }
  } catch (...) {
    return StatusFromException("DDP: broadcasting rank 0's parameters");
  }
  return absl::OkStatus();
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<comm::ProcessGroup> group, DdpOptions options,
                                                 std::unique_ptr<Reducer> reducer)
    : module_(std::move(module)), group_(std::move(group)), options_(options), reducer_(std::move(reducer)) {}

DistributedDataParallel::~DistributedDataParallel() {
  // --zero=3: the hooks gather through this reducer's memory, which goes now.
  if (options_.zero_stage >= 3) module_->SetForwardHooks(nullptr);
}

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Create(
    std::shared_ptr<nn::Module> module, std::shared_ptr<comm::ProcessGroup> group, DdpOptions options,
    std::shared_ptr<UnusedParameterSource> source) {
  if (!module) return absl::InvalidArgumentError("DistributedDataParallel needs a module");
  if (!group) return absl::InvalidArgumentError("DistributedDataParallel needs a process group");
  if (!options.gradient_as_bucket_view) {
    return absl::InvalidArgumentError("gradient_as_bucket_view=false is not supported: gradients are bucket views");
  }
  // Every rank must reduce the same way: a rank with another --zero or
  // comm hook would pair other collectives with its peers' (a hang or
  // garbage on some backends). Named here, once, before anything pairs.
  const std::string mine = absl::StrCat("zero ", options.zero_stage, ", comm hook ",
                                        options.comm_hook ? options.comm_hook->name() : "allreduce");
  absl::StatusOr<std::vector<std::string>> all = group->AllgatherBytes(mine, options.timeout);
  if (!all.ok()) return Annotate(all.status(), "DDP: comparing every rank's reduction options");
  for (size_t r = 0; r < all->size(); ++r) {
    if ((*all)[r] == mine) continue;
    return absl::InvalidArgumentError(absl::StrCat("DDP: rank ", r, " reduces with ", (*all)[r], ", rank ",
                                                   group->rank(), " with ", mine,
                                                   ": every rank must pass the same --zero and --grad-compression"));
  }
  std::vector<autograd::Variable> params = module->parameters();
  if (options.broadcast_parameters) {
    PSYNC_RETURN_IF_ERROR(BroadcastParameters(params, *group, options.timeout));
  }
  // The reducer takes its part of the options as they are (and checks them).
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer,
                         Reducer::Create(std::move(params), group, options, std::move(source)));
  if (options.zero_stage >= 3) {
    // Why hooks on every module: a module's parameters are gathered just
    // before its forward and released after it (zero_schedule.h).
    module->SetForwardHooks(reducer->zero_buckets()->AttachModule(
        *module, ZeroScheduleOptions{options.zero3_prefetch, options.reshard_after_forward}));
  }
  return std::unique_ptr<DistributedDataParallel>(
      new DistributedDataParallel(std::move(module), std::move(group), options, std::move(reducer)));
}

absl::Status DistributedDataParallel::Rejoin(std::shared_ptr<comm::ProcessGroup> group) {
  PSYNC_RETURN_IF_ERROR(reducer_->Rejoin(group));
  // Why after the reducer: it aborts and drains the old group first; the
  // last owners of the old group are the reducer and this wrapper.
  group_ = std::move(group);
  return absl::OkStatus();
}

absl::StatusOr<autograd::Variable> DistributedDataParallel::Forward(const autograd::Variable& x) {
  return Forward([&] { return module_->Forward(x); });
}

absl::StatusOr<autograd::Variable> DistributedDataParallel::Forward(
    const std::function<autograd::Variable()>& forward) {
  PSYNC_ASSIGN_OR_RETURN(std::vector<autograd::Variable> out,
                         ForwardMany([&] { return std::vector<autograd::Variable>{forward()}; }));
  return out.front();
}

absl::StatusOr<std::vector<autograd::Variable>> DistributedDataParallel::ForwardMany(
    const std::function<std::vector<autograd::Variable>()>& forward) {
  // Fail before doing any work when the previous backward was left
  // unfinished (the error names the parameters that got no gradient).
  PSYNC_RETURN_IF_ERROR(reducer_->CheckReadyForForward());
  std::vector<autograd::Variable> outputs;
  PSYNC_RETURN_IF_ERROR(RunCatching("forward", [&] { outputs = forward(); }));
  PSYNC_RETURN_IF_ERROR(reducer_->PrepareForBackward(outputs));
  return outputs;
}

}  // namespace psync::ddp
