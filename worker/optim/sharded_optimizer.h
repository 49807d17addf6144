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

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/optim/gradient_shards.h"
#include "worker/optim/shard_records.h"
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

  // Live recovery (issue 32; shard_records.h says how and what it costs).
  // Before Attach: keep each step's shard on `copies` other ranks too,
  // rank + c * distance mod world (distance: the ranks of one host, so a
  // whole host lost leaves copies elsewhere); off by default.
  void EnableReplicas(int distance, int copies = 2) {
    replica_distance_ = distance;
    replica_copies_ = copies;
  }
  // The training step the state is at (the caller's count of completed
  // steps): set once the state is whole (before Attach; Recover sets it),
  // advanced by each Step. The recovery records are kept by it.
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }
  // After a failure: whether the last Step's collectives (its replica
  // shifts and parameter gathers) all completed on this rank, so this rank
  // holds step() whole; else step() - 1 is the newest it can vouch for.
  // Waits for them (a lost peer fails them fast).
  bool LastStepWhole();
  // Live recovery, collective over the new generation's `group` (every
  // member, a fresh replacement too): rebuilds the whole state at `step`
  // (the generation's start: the newest step a survivor vouched for) from
  // the survivors' shards and the replicas of the lost ranks' shards,
  // writes the parameters (`step`'s values) and keeps the optimizer state
  // whole until the next Attach slices it for the new layout. This rank's
  // own records are untouched unless it succeeds. Errors: DataLoss when a
  // lost rank's shard has no replica left (its holder was lost too: resume
  // from a checkpoint), FailedPrecondition for survivors of different
  // layouts, the group's error when a peer is lost meanwhile.
  absl::Status Recover(comm::ProcessGroup& group, int64_t step, std::chrono::milliseconds timeout);

 protected:
  // The state is sharded: Optimizer::State() lists the step counts only.
  std::vector<std::pair<std::string, Tensor>> StateBuffers(size_t) const override { return {}; }

 private:
  struct RecoveryHeader;
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
  // The segments of rank `rank`'s shard of bucket `fb` (shard elements).
  std::vector<Segment> SegmentsOf(const FlatBucket& fb, int64_t shard, int rank) const;
  // The replica records of a new layout's state (after Layout, and Slice of
  // `given`, the whole state; empty: a fresh one): RefillReplicas, or with
  // ZeRO-3 ShiftReplicas. Collective with ZeRO-3.
  absl::Status FillReplicas(const std::map<std::string, const Tensor*>& given);
  // The replica records' contents from a whole state (after Slice).
  void RefillReplicas(const std::map<std::string, const Tensor*>& given);
  // ZeRO-3: no rank holds another's parameter values, so the replicas of a
  // new layout's state come from their owners instead (a round of shifts of
  // every rank's live shard; collective, at Attach and Reshard).
  absl::Status ShiftReplicas();
  // Whether the data-parallel layer shards the parameters too (ZeRO-3).
  bool ParamsSharded() const;
  // Recover's parts (shard_recovery.cc).
  std::string EncodeRecoveryHeader(int64_t step) const;
  absl::Status RecoverFromShards(comm::ProcessGroup& group, int64_t step, std::chrono::milliseconds timeout,
                                 const std::vector<RecoveryHeader>& headers);
  absl::Status RecoverFromWhole(comm::ProcessGroup& group, int source, int64_t step, std::chrono::milliseconds timeout);
  // This rank's record of bucket b at `step` for Recover (live, previous or
  // replica of `owner`); undefined when it holds none.
  Tensor RecordAt(size_t b, int owner, int64_t step) const;
  // Recover's end: the whole state (parameters written, optimizer pending).
  absl::Status AdoptWhole(const std::vector<Tensor>& params, NamedTensors state, int64_t step);
  // Follows a new bucket layout: the whole state gathered, then re-sliced.
  absl::Status Reshard();
  // This rank's slices of a full state (names as State() of the unsharded optimizer).
  absl::Status Slice(const NamedTensors& full);
  std::vector<StateEntry> FullEntries() const;
  // The values the update runs on for `seg` of bucket b: this rank's shard
  // of the parameter values (see "Precision" above).
  Tensor MasterSlice(size_t b, const Segment& seg) const;
  // Waits for the last step's parameter gathers and replica shifts (before
  // touching them again).
  absl::Status Gathered();
  // The update of bucket b's segments that got a gradient.
  absl::Status UpdateBucket(size_t b, const Tensor& grad, double lr);
  // This rank's shard of bucket b's parameter values (live, in the flat buffer).
  Tensor OwnParams(size_t b) const;

  std::unique_ptr<UpdateRule> rule_;
  std::vector<std::string> buffer_names_;
  std::shared_ptr<GradientShards> shards_;  // null until Attach
  ShardPlan plan_;                          // the layout the state is in
  uint64_t version_ = 0;                    // shards_->version() of plan_
  std::vector<std::vector<Segment>> segments_;  // per bucket
  std::vector<std::vector<Tensor>> state_;      // per bucket, per buffer: shard(b) elements
  NamedTensors pending_;                        // a state loaded before Attach
  // Live recovery.
  int replica_distance_ = 0;        // EnableReplicas
  int replica_copies_ = 0;
  int64_t step_ = 0;                // set_step
  std::vector<int64_t> prev_steps_;  // steps_ as they were before the step in progress
  ShardRecords records_;
};

}  // namespace psync::optim
