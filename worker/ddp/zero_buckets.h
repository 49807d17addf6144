// ZeroBuckets: the ZeRO side of the reducer (--zero=1|2), what the sharded
// optimizer (optim/sharded_optimizer.h) steps on (optim::GradientShards).
//
// Layout: the reducer's gradient buckets, each padded to a multiple of
// kZeroShardAlign x world elements (flat_shard.h), so every rank owns an
// equal contiguous 1/W shard of every bucket, [r*s, (r+1)*s). The
// parameters' values move into flat parameter buffers of the same layout
// (the group's collective buffers: shared memory on shm): every parameter's
// data becomes a view into its bucket's buffer, so the optimizer updates the
// owned shard in place and one all-gather per bucket brings every rank the
// updated values, without copies.
//
// Per step: backward reduce-scatters each bucket (the reducer's
// ReduceScatterHook: the average lands in this rank's shard); Finalized
// records which buckets were reduced and which parameters got a gradient
// on some rank; the optimizer reads GradShard(b) and calls
// GatherParameters(b); the next forward (Reducer::CheckReadyForForward)
// waits for the gathers, so they overlap whatever runs between the step and
// it (the trainer's plans, data, metrics).
//
// Gradient memory: stage 1 keeps the reducer's full bucket buffers (the
// shard is a view of them). Stages 2 and 3 keep only this rank's shards
// between steps (grad_shards_, 1/W) plus one staging buffer the size of the
// largest bucket that backward fills bucket after bucket (zero_staging.h).
//
// Stage 3 (--zero=3) shards the parameters too: instead of flat parameter
// buffers, ZeroParameters keeps this rank's shard of every bucket's values
// and gathers a bucket only while a module needs it, when ZeroSchedule's
// module hooks (AttachModule) say so; the optimizer updates the shard
// (OwnParamShard) and gathers nothing after its step.
//
// Threads: the training thread; the group's communication thread touches a
// buffer only between a collective's launch and its completion.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "psync/autograd/variable.h"
#include "psync/comm/process_group.h"
#include "psync/nn/module.h"
#include "worker/ddp/bucket.h"
#include "worker/ddp/zero_parameters.h"
#include "worker/ddp/zero_schedule.h"
#include "worker/optim/gradient_shards.h"

namespace psync::ddp {

// Shards are whole multiples of this many elements (64: a cache line of
// float32 and of any narrower type), so the gradient (float32) and
// parameter buffers of a bucket cut at the same elements.
inline constexpr int64_t kZeroShardAlign = 64;

// The flat length of a bucket of `elements` under ZeRO at world `world`.
int64_t ZeroPaddedCount(int64_t elements, int world);

class ZeroBuckets : public optim::GradientShards {
 public:
  ZeroBuckets(std::vector<autograd::Variable> params, std::shared_ptr<comm::ProcessGroup> group, int stage,
              std::chrono::milliseconds timeout);

  int stage() const { return stage_; }
  // The reducer's gradient buckets for `plan`, padded; with `staging`
  // (--zero=2) all cut from one new staging buffer the size of the largest,
  // returned there. Collective (the group's collective buffers). Throws
  // std::runtime_error.
  std::vector<Bucket> BuildBuckets(const std::vector<std::vector<size_t>>& plan, Tensor* staging) const;
  // After the reducer (re)built `buckets`: the flat parameter buffers of the
  // same layout, every parameter's data moved into its bucket's buffer, a
  // new version(). Collective (collective buffers). Throws std::runtime_error.
  void Install(const std::vector<Bucket>& buckets);
  // Stage 2: this rank's shard of bucket b lives here between steps.
  Tensor& shard_storage(size_t b) { return grad_shards_[b]; }
  // After a synchronised backward: records which parameters got a gradient
  // on some rank (`global_used`; null: all) and which buckets were reduced
  // (not `skipped`), and clears every parameter's grad: no parameter exposes
  // a grad that is partly other ranks' unreduced values. Returns the number
  // of parameters unused on every rank.
  size_t Finalized(const std::vector<uint8_t>* global_used, const std::vector<uint8_t>& skipped);
  // Bytes of gradient storage this rank holds between steps (stage 2: the
  // shards; the reducer adds its buffers).
  int64_t shard_bytes() const;
  // Runs `fn` (training thread) with the parameters just gathered, each
  // time gathers land (stages 1-2: a round of every bucket's; stage 3: one
  // bucket's): --precision=bf16 rewrites those weights' bfloat16 copies from
  // the gathered float32 values (the sharded update wrote only this rank's
  // shard). fn may throw; the wait returns it as a Status.
  using AfterGather = std::function<void(const std::vector<autograd::Variable>& gathered)>;
  void SetAfterGather(AfterGather fn);

  // Stage 3: the hooks that gather `root`'s parameters (set them on root's
  // tree: Module::SetForwardHooks). Call once, after the first Install.
  std::shared_ptr<nn::ForwardHooks> AttachModule(const nn::Module& root, ZeroScheduleOptions options);
  // The reducer's calls around an iteration. BeginForward: stages 1-2 wait
  // for the last step's gathers; stage 3 releases what is gathered.
  // ParameterDone: a parameter's gradient arrived in this backward, or it is
  // unused here (stage 3 releases a bucket once all of its did). The end of
  // a backward (stage 3 releases everything).
  absl::Status BeginForward();
  void ParameterDone(size_t param);
  absl::Status BackwardDone();
  // Every parameter readable until the next BeginForward (stage 3 gathers
  // them all; stages 1-2 wait for the last step's gathers).
  absl::Status Summon();
  // Bytes of parameter storage this rank holds: stages 1-2 the flat buffers
  // (every value); stage 3 its shards plus the most gathered at once.
  int64_t parameter_bytes() const;
  // Stage 3: the part of it that is the window (the most gathered at once).
  int64_t parameter_window_bytes() const { return memory_ ? memory_->window_bytes() : 0; }

  // optim::GradientShards
  const std::vector<autograd::Variable>& parameters() const override { return params_; }
  const optim::ShardPlan& plan() const override { return plan_; }
  uint64_t version() const override { return version_; }
  Tensor GradShard(size_t b) const override;
  bool HasGrad(size_t i) const override { return i < used_.size() && used_[i] != 0; }
  void GatherParameters(size_t b) override;
  absl::Status WaitParameters() override;
  bool ParametersWhole() const override { return parameters_whole_; }
  Tensor ParamBuffer(size_t b) const override { return stage_ >= 3 ? Tensor() : param_buffers_[b]; }
  Tensor OwnParamShard(size_t b) const override;
  comm::ProcessGroup& group() const override { return *group_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

 private:
  // Stage 3: nothing gathered any more (the schedule's pins reset too).
  absl::Status ReleaseGathered();

  const std::vector<autograd::Variable> params_;
  const std::shared_ptr<comm::ProcessGroup> group_;
  const int stage_;
  const std::chrono::milliseconds timeout_;
  optim::ShardPlan plan_;
  uint64_t version_ = 0;
  std::vector<Tensor> param_buffers_;  // per bucket: the parameters' values, flat and padded
  std::vector<Tensor> grad_shards_;    // per bucket: this rank's averaged gradient shard
  std::vector<uint8_t> used_;          // per parameter, from the last synchronised backward
  std::vector<uint8_t> reduced_;       // per bucket, likewise
  std::vector<std::shared_ptr<comm::Work>> gathers_;  // parameter all-gathers not waited for yet
  AfterGather after_gather_;                          // SetAfterGather
  std::unique_ptr<ZeroParameters> memory_;            // stage 3: the parameters' shards and window
  std::shared_ptr<ZeroSchedule> schedule_;            // stage 3: AttachModule
  bool parameters_whole_ = true;                      // ParametersWhole
};

}  // namespace psync::ddp
