// ZeroSchedule: when --zero=3 gathers and releases the parameters
// (zero_parameters.h), driven by the module forward hooks (psync/nn/module.h)
// and by the reducer's backward.
//
// Order. Buckets hold parameters in backward's order (bucket 0 is what
// backward produces first, i.e. what forward uses last: the recorded
// ready order of the first backward, or the coordinator's plan), so forward
// travels the buckets in descending index and backward in ascending index.
//
//   * Before a module computes (BeforeForward): the buckets holding the
//     parameters of its sub-tree are gathered if they are not, the next
//     `prefetch` buckets in forward's direction are started, and the
//     module waits for its own. They stay pinned while it computes.
//   * After it computed (AfterForward): with reshard_after_forward, every
//     bucket behind it in forward's direction that no open module pins is
//     released (the lowest of its own stays: the next module may share
//     it). A pre-hook on its outputs' autograd nodes gathers its buckets
//     again (and prefetches ascending) before backward runs it.
//   * Backward releases a bucket once every gradient in it arrived
//     (ParameterDone: no node still reads its values), and everything left
//     at its end (ReleaseAll). A new forward (BeginForward) starts with
//     nothing gathered.
//   * Summon: every bucket gathered until the next BeginForward, for
//     readers outside a forward (evaluation, --save); hooks then move
//     nothing.
//
// The gathers are collectives issued from these hooks: every rank must run
// the same modules in the same order (as PyTorch FSDP requires).
//
// Threads: the training thread (forward, and backward's hooks, which run
// on the thread that calls Engine::Backward).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "psync/autograd/variable.h"
#include "psync/nn/module.h"
#include "worker/ddp/zero_parameters.h"
#include "worker/optim/gradient_shards.h"

namespace psync::ddp {

struct ZeroScheduleOptions {
  int prefetch = 1;                    // buckets started ahead of the one needed
  bool reshard_after_forward = true;   // release a module's buckets after its forward
};

class ZeroSchedule : public nn::ForwardHooks, public std::enable_shared_from_this<ZeroSchedule> {
 public:
  // `root`: the module whose tree the hooks are set on (by the caller);
  // `params`: the parameters in the plan's numbering.
  ZeroSchedule(ZeroParameters& memory, const nn::Module& root, const std::vector<autograd::Variable>& params,
               ZeroScheduleOptions options);

  // A new layout was installed (ZeroParameters::Install): the modules'
  // buckets are recomputed.
  void SetLayout(const optim::ShardPlan& plan);

  void BeforeForward(const nn::Module& module) override;
  void AfterForward(const nn::Module& module, const std::vector<autograd::Variable>& outputs) override;

  // Backward (the reducer): parameter i's gradient arrived (or it is unused
  // here); once all of a bucket's did, no node reads its values any more.
  void ParameterDone(size_t i);
  // The end of a backward, or the start of a forward: nothing gathered.
  absl::Status ReleaseAll();
  // Every bucket gathered (and kept until ReleaseAll).
  absl::Status Summon();
  bool summoned() const { return summoned_; }

 private:
  // Before a module's backward (its outputs' node pre-hook).
  void BeforeBackward(const std::vector<size_t>& buckets);
  // Gathers `buckets` if not resident, starts the next `prefetch` from
  // `from` in direction `step` (+1/-1; 0: none), and waits for `buckets`.
  // Throws.
  void Need(const std::vector<size_t>& buckets, size_t from, int step);
  const std::vector<size_t>* BucketsOf(const nn::Module& module) const;

  ZeroParameters& memory_;
  const ZeroScheduleOptions options_;
  std::unordered_map<const nn::Module*, std::vector<size_t>> module_params_;   // the sub-tree's parameters
  std::unordered_map<const nn::Module*, std::vector<size_t>> module_buckets_;  // their buckets, ascending
  std::vector<int> pins_;                                                      // per bucket: open modules needing it
  std::vector<uint8_t> done_;  // per bucket: every gradient arrived in this backward (not gathered again)
  std::vector<size_t> bucket_of_;    // per parameter
  std::vector<size_t> bucket_size_;  // per bucket: its parameters
  std::vector<size_t> remaining_;    // per bucket: parameters whose gradient has not arrived in this backward
  size_t forward_low_ = SIZE_MAX;    // the lowest bucket a module needed in this forward
  bool summoned_ = false;
};

}  // namespace psync::ddp
