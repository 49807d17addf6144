// Reducer: averages gradients across ranks in buckets, overlapping the
// collectives with the rest of backward.
//
// How it hooks in: a post-hook on every parameter's AccumulateGrad (the
// node is created once per leaf and kept, so the hook stays attached and the
// prioritized engine runs it as soon as the gradient exists). The hook marks
// the parameter ready; a bucket launches once all its parameters are ready,
// and buckets launch strictly in index order on every rank
// (next_bucket_to_launch_), so all ranks issue the same collectives in the
// same order. A full bucket goes to the communication hook (comm_hook.h;
// default: allreduce). The first hook of a backward queues Finalize as the
// engine's end-of-backward callback: wait for every bucket's Work
// (options.timeout); the hook's Work leaves the average in the bucket, and
// the gradients are then in each parameter's grad, which is a view into its
// bucket (no copy back out).
//
// Step check (step_check.h): every synchronised backward reduces every
// rank's (iteration, sequence, bucket plan id) with, or just before, bucket
// 0 (in its buffer's tail with the default hook: no extra collective);
// Finalize compares them before anything else, so a rank that skipped or
// repeated a backward fails every rank, naming it (Aborted), instead of
// averaging gradients of different iterations.
//
// Copies: each slot view is its parameter's gradient destination
// (AccumulateGrad::SetGradDestination), so when grad is undefined (first
// backward, ZeroGrad(set_to_none)) a Linear/Matmul backward writes the
// weight and bias gradients straight into the bucket, and AccumulateGrad
// adopts the slot view as grad: no copy at all. Only gradients made by
// other nodes (or a second producer of the same parameter) are copied into
// the slot when the parameter is marked ready (CopyGradIntoSlot).
//
// State machine (state_; every transition is on the backward thread, which
// is also the thread that runs forward):
//
//   kIdle ──PrepareForBackward──► kPrepared ──first hook──► kInBackward
//     ▲                             │   ▲                        │
//     │                             └───┘ PrepareForBackward     │ Finalize OK (synced), or the
//     │                               again: the output was      │ end callback of a no_sync
//     │                               discarded without backward │ backward
//     └──────────────────────────────────────────────────────────┘
//   kIdle ──first hook without PrepareForBackward──► kInBackward
//       (forward bypassed DDP; treated as "every parameter expected")
//   kInBackward (synced) ──PrepareForBackward──► kFailed   (the backward never finished)
//   kInBackward ──Finalize error──► kFailed  (missing gradients, a failed or timed-out collective)
//   kFailed is sticky: PrepareForBackward returns the same error. Entering
//   it aborts the process group so peers fail fast instead of hanging.
//
// Iteration-scoped data (reset by PrepareForBackward): ready_, bucket
// pending counts, next_bucket_to_launch_, locally_unused_. Window-scoped
// (reset only after a synchronised Finalize, so it ORs over no_sync
// micro-batches): local_used_.
//
// Threads: everything here is owned by the backward thread (hooks run on the
// thread that calls Engine::Backward; the engine is single-threaded per
// backward). The process group's communication thread only touches a
// bucket's buffer between launch and Work completion; the backward thread
// only reads Work state (IsCompleted / Wait). Public methods must be called
// from the training thread, between backwards (PrepareForBackward,
// ApplyBucketPlan, SetSyncEnabled, getters).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/autograd/accumulate_grad.h"
#include "psync/autograd/variable.h"
#include "psync/comm/process_group.h"
#include "worker/ddp/bucket.h"
#include "worker/ddp/bucket_assignment.h"
#include "psync/ddp/comm_hook.h"
#include "psync/ddp/reducer_options.h"
#include "worker/ddp/reducer_trace.h"
#include "worker/ddp/step_checker.h"
#include "psync/ddp/unused_parameter_source.h"
#include "worker/ddp/zero_buckets.h"
#include "worker/ddp/zero_staging.h"

namespace psync::ddp {

class Reducer {
 public:
  // `params`: the leaves to reduce (requires_grad, named: names appear in
  // errors). `source`: global unused-parameter sets; null = an allreduce of
  // the bitmaps over `group` (used only with find_unused_parameters).
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(std::vector<autograd::Variable> params,
                                                         std::shared_ptr<comm::ProcessGroup> group,
                                                         ReducerOptions options,
                                                         std::shared_ptr<UnusedParameterSource> source = nullptr);
  ~Reducer();  // detaches the hooks
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Call after every forward, before its backward. With
  // find_unused_parameters, walks the graph from `outputs`; parameters not
  // reached are marked ready at the first hook of the next backward (not
  // now, so an output may be discarded and forward run again). Fails when
  // the previous synchronised backward left reduction unfinished: the error
  // names the parameters that got no gradient.
  absl::Status PrepareForBackward(const std::vector<autograd::Variable>& outputs);
  // The check PrepareForBackward starts with, for callers that want to fail
  // before running forward: the sticky error, or the unfinished-backward
  // error (which also enters kFailed). With --zero=1|2 it first waits for
  // the last step's parameter all-gathers; with --zero=3 it releases every
  // gathered parameter (the forward gathers what it needs) and applies a
  // bucket plan given since the last backward.
  absl::Status CheckReadyForForward();
  // ZeRO: makes the parameters readable outside a forward through DDP
  // (evaluation, saving): --zero=1|2 wait for the all-gathers the sharded
  // optimizer's last step started; --zero=3 gathers every parameter, kept
  // until the next forward. A failure fails the reducer.
  absl::Status WaitForParameters();

  // false = no_sync: hooks only record usage and gradients accumulate
  // locally. Captured by PrepareForBackward (i.e. at forward time).
  void SetSyncEnabled(bool enabled) { sync_enabled_ = enabled; }
  bool sync_enabled() const { return sync_enabled_; }

  // Replaces the buckets with `plan` (bucket -> parameter indices; all
  // parameters, each once, one device per bucket). Call at an iteration
  // boundary (after Finalize, before the next backward; FailedPrecondition
  // during one) with the same plan on every rank. Existing gradients are
  // moved into the new buckets. With ZeRO the plan takes effect at the next
  // forward (PrepareForBackward), after the optimizer consumed the shards.
  absl::Status ApplyBucketPlan(BucketPlan plan);
  // The order parameters became ready in the first synchronised backward
  // (empty before it finished).
  const std::vector<size_t>& recorded_ready_order() const { return recorded_order_; }
  BucketPlan bucket_plan() const;
  // The plan AssignBuckets makes from `order` with this reducer's caps.
  BucketPlan PlanFromOrder(const std::vector<size_t>& order) const {
    return AssignBucketsFor(params_, options_.bucket_caps, order);
  }

  // Synchronised backwards finalized so far (the UnusedParameterSource's
  // iteration number). set_iteration: when resuming from a checkpoint.
  int64_t iteration() const { return iteration_; }
  void set_iteration(int64_t iteration) { iteration_ = iteration; }
  // The caller's training iteration for the coming synchronised backward(s)
  // (call it before each iteration's forward, with the same numbering on
  // every rank). The step check compares it across ranks, so a rank that
  // skipped a backward or ran an extra one is named. Until it is called the
  // check uses iteration() (and then cannot tell a skipped backward).
  void DeclareIteration(int64_t iteration) { step_check_->Declare(iteration); }

  void SetObserver(std::shared_ptr<ReducerObserver> observer) { observer_ = std::move(observer); }

  // Live recovery: goes on with `group`, a process group of the new
  // membership formed after this one failed (a peer was lost). Aborts the
  // old group and waits (up to options.timeout) for its launched buckets, so
  // its communication thread is done with their buffers; drops every
  // gradient (the interrupted step, its no_sync micro-batches included, is
  // computed again) and the sticky failure; builds the buckets again in the
  // same layout on the new group (new buffers: shm's live in the group's
  // shared memory; bucket 0's step-tag tail has the new size), and moves the
  // step check and an own allreduce unused source to it. The iteration
  // counter stays (the interrupted backward was never counted). Training
  // thread, with no backward running and outside NoSync. FailedPrecondition
  // with zero_stage (a lost rank's optimizer shard is gone with it).
  absl::Status Rejoin(std::shared_ptr<comm::ProcessGroup> group);
  const IterationTrace& last_iteration_trace() const { return last_trace_; }

  // OK, or the sticky error (state kFailed).
  absl::Status status() const { return failure_; }
  const std::vector<autograd::Variable>& parameters() const { return params_; }
  size_t num_buckets() const { return buckets_.size(); }
  // ZeRO's shards (null without zero_stage): what the sharded optimizer
  // attaches to (optim/sharded_optimizer.h).
  std::shared_ptr<ZeroBuckets> zero_buckets() const { return zero_; }
  // Bytes of gradient storage this rank holds between steps: the bucket
  // buffers (stage 2: the shards and the staging buffer).
  int64_t gradient_bytes() const;
  // Bytes of parameter storage this rank holds: every value (--zero=3: its
  // shards plus the most it had gathered at once).
  int64_t parameter_bytes() const;
  // The slot of parameter `param` in its bucket: its grad after a synced backward.
  const Tensor& bucket_view(size_t param) const {
    return buckets_[locations_[param].bucket].slots()[locations_[param].slot].view;
  }
  const ReducerOptions& options() const { return options_; }
  comm::ProcessGroup& group() const { return *group_; }

 private:
  enum class State { kIdle, kPrepared, kInBackward, kFailed };
  using Location = SlotLocation;

  Reducer(std::vector<autograd::Variable> params, std::shared_ptr<comm::ProcessGroup> group, ReducerOptions options,
          std::shared_ptr<UnusedParameterSource> source);
  void AttachHooks();
  void InstallBuckets(const BucketPlan& plan);  // builds buckets_ and locations_
  // Makes every slot view its parameter's gradient destination (see
  // AccumulateGrad::SetGradDestination).
  void PointDestinationsAtBuckets();
  absl::Status RebuildBuckets(const BucketPlan& plan);  // validated InstallBuckets, no state check
  absl::Status ApplyDeferredPlan();  // ZeRO: a plan given between a backward and its step
  // The unfinished-backward check of CheckReadyForForward (enters kFailed).
  absl::Status CheckBackwardFinished();

  // Hook path (backward thread).
  void OnGradAccumulated(size_t param);
  void BeginBackward();
  void MarkReady(size_t param);
  void LaunchReadyBuckets();
  void SkipBucket(size_t index);  // unused on every rank: not sent (unused_buckets.h)
  void PollCompletions();
  void RecordError(const absl::Status& status);

  // End-of-backward callbacks (backward thread).
  absl::Status Finalize();
  absl::Status FinishLocalBackward();
  absl::Status WaitForBuckets(TraceClock::time_point deadline);
  void WriteBackGradients(const std::vector<uint8_t>* global_used);
  absl::Status RebuildFromRank0(TraceClock::time_point deadline);

  void ResetIteration(bool sync);
  absl::Status Fail(absl::Status status);

  // ---- configuration (immutable after Create)
  std::vector<autograd::Variable> params_;
  std::vector<std::shared_ptr<autograd::AccumulateGrad>> accumulators_;  // kept alive: hooks stay attached
  std::vector<int> hook_ids_;
  std::shared_ptr<comm::ProcessGroup> group_;
  const ReducerOptions options_;
  std::shared_ptr<CommHook> hook_;
  std::shared_ptr<UnusedParameterSource> source_;
  std::shared_ptr<ReducerObserver> observer_;
  Device device_;  // of the first parameter: where small control tensors live
  std::shared_ptr<ZeroBuckets> zero_;     // ZeRO's side; null without zero_stage
  std::unique_ptr<ZeroStaging> staging_;  // --zero=2's gradient memory; null below stage 2

  // ---- layout (changed only at iteration boundaries)
  std::vector<Bucket> buckets_;
  std::vector<Location> locations_;  // parameter -> (bucket, slot)
  std::optional<BucketPlan> deferred_plan_;  // ZeRO: applied at the next PrepareForBackward

  // ---- state machine (backward thread)
  State state_ = State::kIdle;
  absl::Status failure_;         // set with kFailed
  bool sync_enabled_ = true;     // toggled by NoSync
  bool expect_sync_ = true;      // captured at PrepareForBackward for its backward
  int64_t iteration_ = 0;

  // ---- step check (backward thread): issued at the first hook of a synced
  // backward, verified first thing in Finalize (step_checker.h)
  std::unique_ptr<StepChecker> step_check_;
  uint32_t plan_id_ = 0;                       // BucketPlanId of buckets_ (InstallBuckets)
  bool skip_unused_ = false;                   // skip buckets unused everywhere (source KnowsAhead); fixed at Create
  bool own_source_ = false;                    // source_ is the allreduce over group_ made here (moves on Rejoin)

  // ---- iteration-scoped (reset by PrepareForBackward)
  std::vector<uint8_t> ready_;             // marked ready in this backward
  std::vector<size_t> locally_unused_;     // from the graph walk; marked at the first hook
  size_t next_bucket_to_launch_ = 0;
  std::optional<std::vector<uint8_t>> global_used_now_;  // this iteration's global used set, once known
  std::vector<uint8_t> skipped_;           // per bucket: skipped (unused on every rank)
  size_t next_bucket_to_complete_ = 0;     // completion polling cursor
  absl::Status hook_error_;                // first error inside a hook; Finalize returns it
  IterationTrace trace_;
  IterationTrace last_trace_;

  // ---- window-scoped (reset after a synchronised Finalize)
  std::vector<uint8_t> local_used_;        // OR over the no_sync window

  // ---- bucket rebuild
  bool recording_order_ = true;            // until the first synchronised Finalize
  std::vector<size_t> observed_order_;     // ready order of the current first backward
  std::vector<size_t> recorded_order_;     // published after it finished
};

}  // namespace psync::ddp
