#include "worker/ddp/reducer.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/exit_code.h"
#include "psync/common/logging.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "psync/autograd/engine.h"
#include "worker/ddp/missing_gradient.h"
#include "worker/ddp/reducer_inputs.h"
#include "worker/ddp/unused_buckets.h"
#include "psync/tensor/ops.h"

namespace psync::ddp {
namespace {

// --zero=3: the parameters live in shards, gathered per module.
bool ShardsParameters(const ZeroBuckets* zero) { return zero != nullptr && zero->stage() >= 3; }

}  // namespace

// ---------------------------------------------------------------- creation

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(std::vector<autograd::Variable> params,
                                                         std::shared_ptr<comm::ProcessGroup> group,
                                                         ReducerOptions options,
                                                         std::shared_ptr<UnusedParameterSource> source) {
  if (!group) return absl::InvalidArgumentError("Reducer needs a process group");
  PSYNC_RETURN_IF_ERROR(ValidateReducerInputs(params, options));
  std::unique_ptr<Reducer> reducer(new Reducer(std::move(params), std::move(group), options, std::move(source)));
  const std::vector<size_t> order = ReverseOrder(reducer->params_.size());
  absl::Status st = RunCatching("building buckets", [&] { reducer->InstallBuckets(reducer->PlanFromOrder(order)); });
  if (!st.ok()) return st;
  reducer->AttachHooks();
  return reducer;
}

Reducer::Reducer(std::vector<autograd::Variable> params, std::shared_ptr<comm::ProcessGroup> group,
                 ReducerOptions options, std::shared_ptr<UnusedParameterSource> source)
    : params_(std::move(params)),
      group_(std::move(group)),
      options_(options),
      hook_(options.zero_stage > 0 ? ReduceScatterHook()
                                   : (options.comm_hook ? options.comm_hook : AllreduceHook())),
      source_(std::move(source)),
      device_(params_.front().data().device()) {
  if (options_.zero_stage > 0) {
    zero_ = std::make_shared<ZeroBuckets>(params_, group_, options_.zero_stage, options_.timeout);
  }
  if (options_.zero_stage >= 2) staging_ = std::make_unique<ZeroStaging>(*zero_, params_, accumulators_, options_.timeout);
  if (!source_ && options_.find_unused_parameters) {
    source_ = std::make_shared<AllreduceUnusedParameterSource>(group_, device_);
    own_source_ = true;
  }
  step_check_ = std::make_unique<StepChecker>(*group_, device_, options_.check_in_step, hook_->CarriesStepTag());
  skip_unused_ = options_.find_unused_parameters && source_->KnowsAhead();
  ready_.assign(params_.size(), 0);
  local_used_.assign(params_.size(), 0);
}

Reducer::~Reducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    accumulators_[i]->RemovePostHook(hook_ids_[i]);
    accumulators_[i]->SetGradDestination(Tensor());
  }
}

void Reducer::PointDestinationsAtBuckets() {
  // Why: a gradient computed from scratch (grad undefined, e.g. after
  // ZeroGrad(set_to_none)) is then written by its producer straight into
  // the bucket slot (gradient_as_bucket_view without the copy-in).
  // --zero=2: only the bucket holding the staging buffer has slots to write
  // (zero_staging.h sets its destinations).
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    if (staging_) {
      accumulators_[i]->SetGradDestination(Tensor());
      continue;
    }
    const Location loc = locations_[i];
    accumulators_[i]->SetGradDestination(buckets_[loc.bucket].slots()[loc.slot].view);
  }
}

void Reducer::AttachHooks() {
  accumulators_.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    std::shared_ptr<autograd::AccumulateGrad> acc = params_[i].grad_accumulator();
    hook_ids_.push_back(acc->AddPostHook(
        [this, i](const autograd::TensorList&, const autograd::TensorList&) { OnGradAccumulated(i); }));
    accumulators_.push_back(std::move(acc));
  }
  PointDestinationsAtBuckets();
}

BucketPlan Reducer::bucket_plan() const {
  BucketPlan plan;
  for (const auto& b : buckets_) plan.push_back(b.param_indices());
  return plan;
}

void Reducer::InstallBuckets(const BucketPlan& plan) {
  std::vector<Bucket> buckets;
  std::vector<Location> locations(params_.size());
  Tensor staging;  // --zero=2: every bucket is a view of it (zero_staging.h)
  if (zero_) {
    buckets = zero_->BuildBuckets(plan, staging_ ? &staging : nullptr);
  } else {
    for (size_t b = 0; b < plan.size(); ++b) {
      buckets.push_back(Bucket::Build(b, plan[b], params_, group_.get(), b == 0 ? step_check_->tail_elements() : 0));
    }
  }
  for (size_t b = 0; b < plan.size(); ++b) {
    for (size_t s = 0; s < plan[b].size(); ++s) locations[plan[b][s]] = Location{b, s};
  }
  // Gradients already living in the old buckets move along (values copied),
  // so a rebuild between backward and optimizer step loses nothing. (With
  // --zero=2 no bucket owns its slots: gradients stay where they are.)
  for (size_t i = 0; i < params_.size() && !staging_; ++i) {
    MoveGradIntoSlot(buckets[locations[i].bucket].slots_mutable()[locations[i].slot], params_[i]);
  }
  if (staging_) staging_->Reset(std::move(staging));
  buckets_ = std::move(buckets);
  locations_ = std::move(locations);
  plan_id_ = BucketPlanId(plan);
  if (zero_) zero_->Install(buckets_);
  PointDestinationsAtBuckets();
}

int64_t Reducer::parameter_bytes() const { return zero_ ? zero_->parameter_bytes() : ParameterBytes(params_); }

int64_t Reducer::gradient_bytes() const {
  if (staging_) return zero_->shard_bytes() + static_cast<int64_t>(staging_->buffer().nbytes());
  int64_t bytes = 0;
  for (const Bucket& b : buckets_) bytes += static_cast<int64_t>(b.nbytes());
  return bytes;
}

absl::Status Reducer::ApplyBucketPlan(BucketPlan plan) {
  if (state_ == State::kFailed) return failure_;
  if (state_ == State::kInBackward) {
    return absl::FailedPreconditionError("ApplyBucketPlan must be called between iterations, not during backward");
  }
  PSYNC_RETURN_IF_ERROR(RebuildBuckets(plan));
  // Between forward and backward (kPrepared) nothing is ready yet; only the
  // per-bucket trace slots must follow the new layout.
  trace_.buckets.assign(buckets_.size(), BucketTrace{});
  skipped_.assign(buckets_.size(), 0);
  return absl::OkStatus();
}

absl::Status Reducer::RebuildBuckets(const BucketPlan& plan) {
  std::vector<Device> devices;
  for (const auto& p : params_) devices.push_back(p.data().device());
  PSYNC_RETURN_IF_ERROR(ValidateBucketPlan(plan, devices));
  if (zero_ && (state_ != State::kPrepared || ShardsParameters(zero_.get()))) {
    // ZeRO: the last backward's reduced shards (and the parameters' layout)
    // must reach the optimizer's step first; the plan takes effect at the
    // next forward (PrepareForBackward; --zero=3: before it, since its
    // graph reads the parameters of the layout it ran with), the same
    // iteration on every rank.
    deferred_plan_.reset();
    if (plan != bucket_plan()) deferred_plan_ = plan;
    return absl::OkStatus();
  }
  deferred_plan_.reset();
  if (plan == bucket_plan()) return absl::OkStatus();
  // Why: a new layout (the observed order, or the coordinator's plan) takes
  // effect at this iteration boundary, identically on every rank.
  return RunCatching("rebuilding buckets", [&] { InstallBuckets(plan); });
}

absl::Status Reducer::ApplyDeferredPlan() {
  if (!deferred_plan_) return absl::OkStatus();
  const BucketPlan plan = std::move(*deferred_plan_);
  deferred_plan_.reset();
  return RunCatching("rebuilding buckets", [&] { InstallBuckets(plan); });
}

// ---------------------------------------------------------------- live recovery

absl::Status Reducer::Rejoin(std::shared_ptr<comm::ProcessGroup> group) {
  if (!group) return absl::InvalidArgumentError("Reducer::Rejoin needs a process group");
  if (zero_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DDP: --zero=", options_.zero_stage, " cannot go on with a new membership: the optimizer state and "
        "gradient shards of a lost rank existed only there (resume from a checkpoint instead)"));
  }
  // Why abort first: a peer that is still alive may be blocked in a
  // collective of the old membership; aborting ends it, and ends ours, so
  // no communication thread still writes into a bucket buffer we drop.
  const absl::Status replaced = absl::AbortedError(absl::StrCat(
      "rank ", group_->rank(), " left this process group for a new membership of ", group->size(), " ranks"));
  group_->Abort(replaced);
  for (size_t k = 0; k < next_bucket_to_launch_ && k < buckets_.size(); ++k) {
    if (buckets_[k].work) (void)buckets_[k].work->Wait(options_.timeout);  // failed by the abort, or finished
  }
  // Why drop every gradient: the interrupted step (and the micro-batches
  // accumulated under no_sync before it) is computed again over the new
  // membership; a half-reduced bucket must never reach the optimizer.
  for (const autograd::Variable& p : params_) p.set_grad(Tensor());
  group_ = std::move(group);
  step_check_ = std::make_unique<StepChecker>(*group_, device_, options_.check_in_step, hook_->CarriesStepTag());
  if (own_source_) source_ = std::make_shared<AllreduceUnusedParameterSource>(group_, device_);
  const BucketPlan plan = bucket_plan();
  PSYNC_RETURN_IF_ERROR(RunCatching("building the buckets on the new process group", [&] { InstallBuckets(plan); }));
  state_ = State::kIdle;
  failure_ = absl::OkStatus();
  std::fill(local_used_.begin(), local_used_.end(), 0);
  ResetIteration(sync_enabled_);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- forward side

void Reducer::ResetIteration(bool sync) {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (auto& b : buckets_) b.ResetForIteration();
  next_bucket_to_launch_ = 0;
  next_bucket_to_complete_ = 0;
  locally_unused_.clear();
  hook_error_ = absl::OkStatus();
  step_check_->Reset();
  expect_sync_ = sync;
  observed_order_.clear();
  global_used_now_.reset();
  skipped_.assign(buckets_.size(), 0);
  trace_ = IterationTrace{};
  trace_.iteration = iteration_;
  trace_.synced = sync;
  trace_.buckets.resize(buckets_.size());
}

absl::Status Reducer::WaitForParameters() {
  if (state_ == State::kFailed) return failure_;
  if (!zero_) return absl::OkStatus();
  absl::Status st = zero_->Summon();
  if (st.ok()) return st;
  return Fail(Annotate(st, absl::StrCat("DDP: gathering the updated parameters (rank ", group_->rank(), ")")));
}

absl::Status Reducer::CheckReadyForForward() {
  if (state_ == State::kFailed) return failure_;
  if (zero_) {
    // Stages 1-2: the last step's gathers land; stage 3: the forward
    // gathers what it needs, starting from nothing (a plan given since the
    // last backward takes effect first).
    absl::Status st = zero_->BeginForward();
    if (st.ok() && ShardsParameters(zero_.get())) st = ApplyDeferredPlan();
    if (!st.ok()) return Fail(Annotate(st, absl::StrCat("DDP: before the forward (rank ", group_->rank(), ")")));
  }
  return CheckBackwardFinished();
}

absl::Status Reducer::CheckBackwardFinished() {
  if (state_ == State::kInBackward && expect_sync_) {
    // Why: hooks fired but Finalize never ran (backward failed midway, or
    // its error was ignored); buckets may be in flight on some ranks only.
    return Fail(MissingGradientError(absl::StrCat(
        "DDP: the previous backward (iteration ", iteration_, ", rank ", group_->rank(), " of ", group_->size(),
        ") did not finish gradient reduction before this forward. Parameters that got no gradient: ",
        absl::StrJoin(UnreadyParameterNames(params_, ready_), ", "))));
  }
  return absl::OkStatus();
}

absl::Status Reducer::PrepareForBackward(const std::vector<autograd::Variable>& outputs) {
  // --zero=3: after its forward nothing is waited for (its gathers were),
  // and a plan waits for the next forward.
  const bool sharded_parameters = ShardsParameters(zero_.get());
  PSYNC_RETURN_IF_ERROR(sharded_parameters ? CheckBackwardFinished() : CheckReadyForForward());
  if (absl::Status st = sharded_parameters ? absl::OkStatus() : ApplyDeferredPlan(); !st.ok()) return Fail(st);
  // Why: a new forward starts a new backward's bookkeeping. From kPrepared
  // this is the "output discarded without backward" case; nothing was
  // launched, so resetting is safe. A no_sync backward needs no finishing.
  ResetIteration(sync_enabled_);
  trace_.prepare = TraceClock::now();
  if (options_.find_unused_parameters && expect_sync_) {
    // Why now and not at the first hook: the graph is complete after
    // forward. Marking waits for the first hook (BeginBackward) so that a
    // discarded output leaves nothing half-done.
    std::unordered_set<const autograd::Node*> reached;
    for (const auto& acc : autograd::ReachableAccumulators(outputs)) reached.insert(acc.get());
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!reached.count(accumulators_[i].get())) locally_unused_.push_back(i);
    }
  }
  state_ = State::kPrepared;
  return absl::OkStatus();
}

// ---------------------------------------------------------------- hooks (backward thread)

void Reducer::OnGradAccumulated(size_t param) {
  if (state_ == State::kFailed) {
    // Why throw: a backward after a failure (without a forward, which would
    // have returned the error) must not quietly leave gradients unreduced.
    // The engine stops and returns this as the backward's error.
    throw std::runtime_error(absl::StrCat("DDP reducer failed earlier: ", failure_.ToString()));
  }
  absl::Status st = RunCatching(absl::StrCat("DDP hook of ", ParameterName(params_[param], param)), [&] {
    if (state_ != State::kInBackward) BeginBackward();
    // --zero=3: a bucket whose gradients all arrived is released (no_sync too).
    if (zero_) zero_->ParameterDone(param);
    // Why: usage is what the global unused map is made of; OR-ed over a
    // no_sync window because the flags are only cleared by a synced Finalize.
    local_used_[param] = 1;
    if (!expect_sync_) return;  // no_sync: the gradient stays local, accumulated in grad
    MarkReady(param);
  });
  if (!st.ok()) RecordError(st);
}

void Reducer::BeginBackward() {
  if (state_ == State::kIdle) {
    // Why: forward did not go through PrepareForBackward (module called
    // directly); treat it as a forward with every parameter expected.
    if (!ShardsParameters(zero_.get())) {
      if (absl::Status st = ApplyDeferredPlan(); !st.ok()) RecordError(st);
    }
    ResetIteration(sync_enabled_);
  }
  state_ = State::kInBackward;
  trace_.first_hook = TraceClock::now();
  absl::Status st = autograd::Engine::Get().QueueCallback(
      [this]() -> absl::Status { return expect_sync_ ? Finalize() : FinishLocalBackward(); });
  if (!st.ok()) RecordError(Annotate(st, "DDP: queueing the end-of-backward callback"));
  if (!expect_sync_) return;
  // Why before marking anything ready: the check's collective must precede
  // bucket 0 in every rank's issue order.
  if (absl::Status st = step_check_->Issue(iteration_, plan_id_, buckets_.front().tail()); !st.ok()) RecordError(st);
  // Why at the first hook and not in PrepareForBackward: only now is this
  // backward certain to run, so the caller could discard the outputs before.
  for (size_t i : locally_unused_) {
    if (zero_) zero_->ParameterDone(i);
    MarkReady(i);
  }
  trace_.locally_unused = locally_unused_.size();
}

void Reducer::MarkReady(size_t param) {
  if (ready_[param]) {
    RecordError(absl::InternalError(absl::StrCat("DDP: ", ParameterName(params_[param], param),
                                                 " was marked ready twice in one backward (a reentrant backward, or "
                                                 "a parameter shared between two reducers?)")));
    return;
  }
  ready_[param] = 1;
  if (recording_order_) observed_order_.push_back(param);
  const Location loc = locations_[param];
  Bucket& bucket = buckets_[loc.bucket];
  // Copy-in: the accumulated gradient (also one accumulated locally under
  // no_sync, or zeros when unused here) goes into the bucket slot now.
  // --zero=2: only once the bucket holds the staging buffer (zero_staging.h).
  if (!staging_ || staging_->holds(loc.bucket)) {
    CopyGradIntoSlot(bucket.slots_mutable()[loc.slot], params_[param]);
  } else if (loc.bucket == next_bucket_to_launch_) {
    absl::StatusOr<bool> got = staging_->Acquire(loc.bucket, buckets_, ready_, /*wait=*/false);
    if (!got.ok()) RecordError(got.status());
  }
  if (--bucket.pending == 0) LaunchReadyBuckets();
  PollCompletions();
}

void Reducer::LaunchReadyBuckets() {
  // Why strictly in index order: every rank must issue the same collectives
  // in the same order; a ready bucket waits for all lower-indexed ones.
  while (next_bucket_to_launch_ < buckets_.size() && buckets_[next_bucket_to_launch_].pending == 0) {
    // Unused on every rank: not sent (unused_buckets.h). Not the bucket
    // carrying the step tags.
    if (skip_unused_ && !(next_bucket_to_launch_ == 0 && step_check_->fused())) {
      const Bucket& next = buckets_[next_bucket_to_launch_];
      BucketFate fate = DecideBucket(next, local_used_, global_used_now_);
      if (fate == BucketFate::kWait) {
        global_used_now_ = source_->TryGlobalUsed(iteration_);
        fate = DecideBucket(next, local_used_, global_used_now_);
      }
      if (fate == BucketFate::kWait) return;  // a later hook, or finalize, decides
      if (fate == BucketFate::kSkip) {
        SkipBucket(next_bucket_to_launch_++);
        continue;
      }
    }
    if (staging_) {
      // --zero=2: the bucket's gradients go into the staging buffer first
      // (waiting for the previous holder's reduce-scatter if needed).
      absl::StatusOr<bool> got = staging_->Acquire(next_bucket_to_launch_, buckets_, ready_, /*wait=*/true);
      if (!got.ok()) {
        RecordError(got.status());
        return;
      }
    }
    Bucket& b = buckets_[next_bucket_to_launch_++];
    b.launch_time = TraceClock::now();
    b.work = hook_->Run(*group_, GradBucket{b.index(), b.buffer()});
    b.launched = true;
    BucketTrace& t = trace_.buckets[b.index()];
    t = BucketTrace{b.index(), b.nbytes(), b.slots().size(), b.launch_time, {}};
    if (trace_.launch_order.empty()) trace_.first_launch = b.launch_time;
    trace_.last_launch = b.launch_time;
    trace_.launch_order.push_back(b.index());
    if (observer_) observer_->OnBucketLaunched(iteration_, t);
  }
  if (next_bucket_to_launch_ == buckets_.size() && options_.find_unused_parameters) {
    // Why here: right after the last bucket launch is the same point of the
    // same iteration on every rank, and local_used_ is final (every
    // parameter was marked).
    source_->Submit(iteration_, local_used_);
  }
}

void Reducer::SkipBucket(size_t index) {
  Bucket& b = buckets_[index];
  b.launch_time = TraceClock::now();
  b.work = SkippedBucketWork(index);
  b.launched = true;
  skipped_[index] = 1;
  ++trace_.skipped_buckets;
  trace_.buckets[index] = BucketTrace{index, 0, b.slots().size(), b.launch_time, {}};
  trace_.launch_order.push_back(index);
}

void Reducer::PollCompletions() {
  while (next_bucket_to_complete_ < next_bucket_to_launch_) {
    Bucket& b = buckets_[next_bucket_to_complete_];
    if (!b.work->IsCompleted()) return;
    b.completed = true;
    b.complete_time = TraceClock::now();
    trace_.buckets[b.index()].complete = b.complete_time;
    if (observer_) observer_->OnBucketCompleted(iteration_, trace_.buckets[b.index()]);
    ++next_bucket_to_complete_;
  }
}

void Reducer::RecordError(const absl::Status& status) {
  if (hook_error_.ok()) hook_error_ = status;
}

// ---------------------------------------------------------------- end of backward

absl::Status Reducer::FinishLocalBackward() {
  // Why: a no_sync backward has nothing to wait for; gradients stay local.
  state_ = State::kIdle;
  if (zero_) RecordError(zero_->BackwardDone());  // --zero=3: its parameters released
  trace_.finalize_begin = trace_.finalize_end = TraceClock::now();
  last_trace_ = trace_;
  if (observer_) observer_->OnIterationFinalized(last_trace_);
  return hook_error_;
}

absl::Status Reducer::Fail(absl::Status status) {
  // Why abort: peers are blocked in (or about to issue) collectives this
  // rank will never match; aborting makes them fail fast, not hang.
  state_ = State::kFailed;
  failure_ = status;
  group_->Abort(status);
  return status;
}

absl::Status Reducer::Finalize() {
  trace_.finalize_begin = TraceClock::now();
  const TraceClock::time_point deadline = trace_.finalize_begin + options_.timeout;
  if (!hook_error_.ok()) return Fail(hook_error_);
  if (skip_unused_ && next_bucket_to_launch_ < buckets_.size() && buckets_[next_bucket_to_launch_].pending == 0) {
    // A bucket unused here waits for this iteration's global set.
    const auto remaining = std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                      deadline - TraceClock::now()));
    absl::StatusOr<std::vector<uint8_t>> used = source_->GlobalUsed(iteration_, remaining);
    if (!used.ok()) return Fail(Annotate(used.status(), "DDP: global unused-parameter map (to skip unused buckets)"));
    global_used_now_ = std::move(*used);
    LaunchReadyBuckets();
    if (!hook_error_.ok()) return Fail(hook_error_);
  }
  if (next_bucket_to_launch_ < buckets_.size()) {
    // Why here, before any optimizer step: a parameter without a gradient
    // left its bucket (and all later ones) unlaunched on this rank.
    const std::vector<std::string> names = UnreadyParameterNames(params_, ready_);
    return Fail(MissingGradientError(absl::StrCat(
        "DDP: backward finished but ", names.size(), " parameter(s) got no gradient on rank ", group_->rank(),
        " of ", group_->size(), " (iteration ", iteration_, "), so their buckets were never reduced (the process "
        "group was aborted so peers fail fast): ",
        absl::StrJoin(names, ", "))));
  }
  // Why before the buckets: a rank out of step may have paired buckets of
  // different shapes too (a plan applied at another iteration), and the
  // named cause beats the collective's own error.
  // Bucket 0 was launched: every bucket was, checked above.
  if (absl::Status st = step_check_->Verify(buckets_.front().work, buckets_.size(), deadline); !st.ok()) {
    return Fail(st);
  }
  PSYNC_RETURN_IF_ERROR(WaitForBuckets(deadline));
  if (staging_) {
    absl::Status released = staging_->Release(buckets_);
    if (!released.ok()) return Fail(released);
  }

  std::vector<uint8_t> global_used;
  if (options_.find_unused_parameters) {
    const auto remaining =
        std::max(std::chrono::milliseconds(0),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - TraceClock::now()));
    absl::StatusOr<std::vector<uint8_t>> used = source_->GlobalUsed(iteration_, remaining);
    if (!used.ok()) return Fail(Annotate(used.status(), "DDP: global unused-parameter map"));
    if (used->size() != params_.size()) {
      return Fail(absl::InternalError(absl::StrCat("DDP: global used map has ", used->size(), " entries for ",
                                                   params_.size(), " parameters")));
    }
    global_used = std::move(*used);
  }
  absl::Status st = RunCatching("DDP: averaging gradients",
                                [&] { WriteBackGradients(options_.find_unused_parameters ? &global_used : nullptr); });
  if (!st.ok()) return Fail(st);
  if (zero_) {
    // --zero=3: the backward's parameters released (what prefetch started too).
    if (st = zero_->BackwardDone(); !st.ok()) return Fail(st);
  }

  if (recording_order_) {
    // Why: the first synced backward's ready order is the layout the next
    // iterations want (buckets fill in the order gradients arrive).
    recording_order_ = false;
    recorded_order_ = observed_order_;
    if (options_.rebuild == RebuildMode::kBroadcastFromRank0) {
      st = RebuildFromRank0(deadline);
      if (!st.ok()) return Fail(st);
    }
  }
  // Why: the no_sync window (if any) ends with this synced backward.
  std::fill(local_used_.begin(), local_used_.end(), 0);
  ++iteration_;
  state_ = State::kIdle;
  trace_.finalize_end = TraceClock::now();
  last_trace_ = trace_;
  if (observer_) observer_->OnIterationFinalized(last_trace_);
  return absl::OkStatus();
}

absl::Status Reducer::WaitForBuckets(TraceClock::time_point deadline) {
  // Buckets PollCompletions already saw complete: IsCompleted() is also true
  // for a collective that FAILED (e.g. NCCL: the group was aborted/poisoned,
  // or the completion event reported a CUDA error), so their status still
  // has to be collected. Wait on a completed work returns at once (and on
  // NCCL orders the compute stream after the collective).
  for (size_t k = 0; k < next_bucket_to_complete_; ++k) {
    absl::Status st = buckets_[k].work->Wait(std::chrono::milliseconds(0));
    if (!st.ok()) {
      return Fail(Annotate(st, absl::StrCat("DDP: reducing bucket ", k, " of ", buckets_.size(), " (rank ",
                                            group_->rank(), ", iteration ", iteration_, ")")));
    }
  }
  for (size_t k = next_bucket_to_complete_; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    const auto remaining = std::max(
        std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(deadline - TraceClock::now()));
    absl::Status st = b.work->Wait(remaining);
    if (!st.ok()) {
      return Fail(Annotate(st, absl::StrCat("DDP: reducing bucket ", k, " of ", buckets_.size(), " (rank ",
                                            group_->rank(), ", iteration ", iteration_, ")")));
    }
    b.completed = true;
    b.complete_time = TraceClock::now();
    trace_.buckets[k].complete = b.complete_time;
    if (observer_) observer_->OnBucketCompleted(iteration_, trace_.buckets[k]);
    next_bucket_to_complete_ = k + 1;
  }
  return absl::OkStatus();
}

void Reducer::WriteBackGradients(const std::vector<uint8_t>* global_used) {
  if (zero_) {
    // ZeRO: only this rank's shard of each bucket holds averages.
    trace_.globally_unused = zero_->Finalized(global_used, skipped_);
    return;
  }
  // The buckets already hold the averages (the hook's Work divided).
  trace_.globally_unused = AdoptAveragedGradients(params_, buckets_, locations_, global_used);
}

absl::Status Reducer::RebuildFromRank0(TraceClock::time_point deadline) {
  const size_t n = params_.size();
  if (observed_order_.size() != n) {
    return absl::InternalError(
        absl::StrCat("DDP: observed ready order has ", observed_order_.size(), " of ", n, " parameters"));
  }
  const auto remaining = std::max(std::chrono::milliseconds(0),
                                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - TraceClock::now()));
  PSYNC_ASSIGN_OR_RETURN(std::vector<size_t> order, BroadcastOrder(*group_, observed_order_, device_, remaining));
  PSYNC_RETURN_IF_ERROR(RebuildBuckets(PlanFromOrder(order)));
  trace_.rebuilt_buckets = true;
  return absl::OkStatus();
}

}  // namespace psync::ddp
