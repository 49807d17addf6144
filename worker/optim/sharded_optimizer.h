// ShardedOptimizer: ZeRO stage 1 behind the Optimizer interface. Each rank
// keeps the optimizer state (AdamW's moments, SGD's momentum) only for the
// contiguous shard of every flat bucket it owns (gradient_shards.h: 1/W of
// the elements), updates only those elements of the parameters, and
// all-gathers each bucket's parameters once its shard is updated.
//
//   auto opt = ShardedOptimizer::Create(model->named_parameters(), std::move(rule));   // before joining
//   ... --resume: opt->LoadCheckpointState(full)  (kept until Attach)
//   opt->Attach(ddp->reducer().gradient_shards());                                     // once DDP exists
//   per step: backward (reduce-scatters), [ClipGradNorm], Step(lr)
//
// Semantics are the whole-parameter optimizer's, element for element: the
// same UpdateRule on the same values (so on a backend whose reduce-scatter
// gives the allreduce's bits, the weights equal the unsharded run's bit for
// bit); a parameter unused on every rank is untouched (no decay, no moment
// update) and its own step count does not advance (the counts are kept for
// every parameter on every rank: they are tiny and every rank knows which
// parameters got a gradient).
//
// Collectives (every rank calls these in the same order): Step (the
// parameters' all-gathers, left in flight for the next forward to wait
// for), ClipGradNorm (the partial sums of squares,
// combined in rank order), CheckpointState (an all-gather per bucket and
// buffer), and a Step after the bucket layout changed (the state moves to
// its new owners: gathered in full, then re-sliced).
//
// Precision: the update runs on the parameter's own elements (the master
// copy is the parameter). A precision policy with lower-precision
// parameters plugs in at MasterSlice: it keeps the master values for this
// rank's shard only (sharded like the moments) and writes the rounded
// values into the parameter buffer before the bucket's all-gather.
//
// Threads: the training thread only.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/optim/gradient_shards.h"
#include "psync/optim/optimizer.h"
#include "psync/optim/update_rule.h"

namespace psync::optim {

class ShardedOptimizer final : public Optimizer {
 public:
  // Validates the parameters (Optimizer::ValidateParams).
  static absl::StatusOr<std::unique_ptr<ShardedOptimizer>> Create(NamedParams params,
                                                                  std::unique_ptr<UpdateRule> rule);

  // The algorithm's name ("adamw"): checkpoints of sharded and unsharded
  // runs hold the same state under the same names.
  std::string name() const override { return rule_->name(); }

  // Connects to the data-parallel layer (its parameters must be this
  // optimizer's, in the same order) and makes the state of this rank's
  // shards: zeros, or the slices of a state loaded before.
  absl::Status Attach(std::shared_ptr<GradientShards> shards);
  bool attached() const { return shards_ != nullptr; }

  // Updates this rank's shard of every reduced bucket, and starts the
  // all-gather of each bucket's parameters as soon as its shard is done.
  // Returns with the gathers in flight: the next forward waits for them
  // (GradientShards::WaitParameters), as must anything else that reads the
  // parameters before it (evaluation, --save).
  absl::Status Step(double lr) override;
  absl::StatusOr<double> ClipGradNorm(double max_norm) override;
  absl::StatusOr<NamedTensors> CheckpointState(bool keep = true) override;
  absl::Status LoadCheckpointState(const NamedTensors& state) override;
  int64_t state_bytes() const override;

 protected:
  // The state is sharded: Optimizer::State() lists the step counts only.
  std::vector<std::pair<std::string, Tensor>> StateBuffers(size_t) const override { return {}; }

 private:
  // A contiguous run of one parameter's elements inside this rank's shard.
  struct Segment {
    size_t param = 0;
    int64_t param_offset = 0;  // in the flattened parameter
    int64_t shard_offset = 0;  // in this rank's shard of the bucket
    int64_t length = 0;
  };
  ShardedOptimizer(NamedParams params, std::unique_ptr<UpdateRule> rule);
  // Segments and zero state for `plan`.
  void Layout(const ShardPlan& plan);
  // Follows a new bucket layout: the whole state gathered, then re-sliced.
  absl::Status Reshard();
  // This rank's slices of a full state (names as State() of the unsharded optimizer).
  absl::Status Slice(const NamedTensors& full);
  std::vector<StateEntry> FullEntries() const;
  // The values the update runs on for `seg`, and where they go after it
  // (the parameter itself: both no-ops; see "Precision" above).
  Tensor MasterSlice(const Segment& seg) const;
  // Waits for the last step's parameter gathers (before touching them again).
  absl::Status Gathered();

  std::unique_ptr<UpdateRule> rule_;
  std::vector<std::string> buffer_names_;
  std::shared_ptr<GradientShards> shards_;  // null until Attach
  ShardPlan plan_;                          // the layout the state is in
  uint64_t version_ = 0;                    // shards_->version() of plan_
  std::vector<std::vector<Segment>> segments_;  // per bucket
  std::vector<std::vector<Tensor>> state_;      // per bucket, per buffer: shard(b) elements
  NamedTensors pending_;                        // a state loaded before Attach
};

}  // namespace psync::optim
