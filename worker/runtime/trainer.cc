#include "worker/runtime/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "psync/common/logging.h"
#include "psync/common/status_macros.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "worker/control/plan_window.h"
#include "worker/ddp/missing_gradient.h"
#include "worker/data/prefetcher.h"
#include "worker/runtime/evaluator.h"
#include "worker/runtime/objective.h"
#include "worker/runtime/summary.h"
#include "worker/runtime/test_kill.h"
#include "worker/runtime/train_tracing.h"
#include "worker/runtime/worker_exit.h"
#include "psync/tensor/ops.h"
#include "worker/ddp/reducer.h"
#include "worker/tensor/cpu_allocator.h"
#include "worker/tensor/cuda/cuda_device.h"

namespace psync::runtime {

namespace {

using control::IterationPlan;
using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The bytes of tensor memory lent now on `device`: psync's CPU allocator,
// or the CUDA device's pool.
int64_t TensorBytesInUse(Device device) {
  if (device.is_cuda()) return static_cast<int64_t>(cuda_device::InUseBytes(device.index));
  return static_cast<int64_t>(CpuCachingAllocator::Get().stats().in_use_bytes);
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

// One run of the loop; the state of the run lives here so each phase of a
// step is a short method. Owned by the training thread.
class TrainLoop {
 public:
  explicit TrainLoop(const TrainContext& ctx)
      : ctx_(ctx),
        opt_(ctx.options),
        reducer_(ctx.ddp->reducer()),
        window_(ctx.plan_lookahead, ctx.first_step),
        task_(ctx.train->info().task),
        skip_set_(opt_.skip.layer >= 0 ? std::set<int>{opt_.skip.layer} : std::set<int>{}) {
    result_.final_loss = result_.val_loss = result_.val_accuracy = std::numeric_limits<double>::quiet_NaN();
    const auto& params = reducer_.parameters();
    for (size_t p = 0; p < params.size(); ++p) param_of_accumulator_[params[p].grad_accumulator().get()] = p;
    // Items a step consumes over all ranks: tokens for a language model, else examples.
    items_per_step_ = static_cast<double>(opt_.global_batch) *
                      (task_ == data::Task::kLanguageModel ? static_cast<double>(opt_.block_size) : 1.0);
    if (ctx.trace && ctx.trace->enabled()) {
      reducer_.SetObserver(std::make_shared<ReducerTraceObserver>(ctx.trace));
      acc_tracer_.emplace(ctx.trace);
    }
  }

  TrainResult Run();

 private:
  // Why the run cannot go on: the error, the iteration it belongs to, where.
  struct Failure {
    absl::Status status;
    int64_t iteration;
    const char* where;
  };

  TrainResult Fail(const Failure& f);
  TrainResult Stopped(int64_t last_step);
  // Before step `step`: the plans it needs (Plan{step-K}) and a bucket plan
  // due now; sets *stop when one of them stops every rank before this step.
  std::optional<Failure> BeforeStep(int64_t step, bool* stop);
  // The rest of the step that began at `t0` (its plans taken): data,
  // forward/backward, optimizer, evaluation, metrics, progress, a periodic
  // checkpoint.
  std::optional<Failure> Step(int64_t step, data::Prefetcher& prefetch, Clock::time_point t0);
  // After the last step: the remaining plans, the final evaluation and checkpoint.
  std::optional<Failure> AfterLastStep();
  // Waits for, consumes and releases every plan through `through`, in order.
  absl::Status TakePlans(int64_t through, int64_t step);
  absl::Status ApplyBucketPlan(int64_t step);
  // Forward and backward of every micro-batch of the step; returns this
  // rank's loss of the step (sum of the micro-batch losses / M).
  absl::StatusOr<double> ForwardBackward(int64_t step, const data::StepBatches& batches);
  // Clipping and the optimizer step at the schedule's rate: fills lr and grad_norm.
  absl::Status OptimizerStep(int64_t step, StepMetrics* m);
  absl::Status Evaluate(int64_t step, StepMetrics* m);
  absl::Status SaveCheckpoint(int64_t steps_completed) {
    TraceWriter::Scope span(ctx_.trace, "checkpoint", "train", TraceWriter::kMain,
                            {{"steps", std::to_string(steps_completed)}});
    // --zero=3: rank 0 writes every parameter, so every rank gathers them.
    PSYNC_RETURN_IF_ERROR(reducer_.WaitForParameters());
    PSYNC_RETURN_IF_ERROR(ctx_.save_checkpoint(steps_completed));
    last_checkpoint_ = steps_completed;
    return absl::OkStatus();
  }
  void PrintProgress(int64_t step, const StepMetrics& m, Clock::time_point now);
  // Periodic evaluations (--eval-every); the last step's is AfterLastStep's.
  bool EvaluatesAfter(int64_t step) const {
    if (ctx_.val == nullptr || step + 1 == opt_.steps) return false;
    return opt_.eval_every > 0 && (step + 1) % opt_.eval_every == 0;
  }
  void WriteMetrics(int64_t step, const StepMetrics& m) {
    if (ctx_.metrics) {
      if (absl::Status st = ctx_.metrics->Write(m); !st.ok()) PSYNC_LOG(WARNING) << st.message();
    }
    PrintProgress(step, m, Clock::now());
  }

  const TrainContext& ctx_;
  const TrainOptions& opt_;
  ddp::Reducer& reducer_;
  control::PlanWindow window_;
  const data::Task task_;
  const std::set<int> skip_set_;
  std::unordered_map<const autograd::Node*, size_t> param_of_accumulator_;
  std::optional<AccumulateGradTracer> acc_tracer_;
  double items_per_step_ = 0;
  TrainResult result_;
  double last_step_ms_ = 0, prev_loss_ = 0;
  double rank_tokens_per_s_ = 0;  // this rank's share of the last step's items per second (the reports carry it)
  Clock::time_point start_;
  int64_t last_evaluated_ = -1;
  int64_t last_checkpoint_ = -1;
  std::optional<StepMetrics> last_step_metrics_;  // --steps' last step: written once evaluated (AfterLastStep)
};

TrainResult TrainLoop::Fail(const Failure& f) {
  // DDP's advice names its option; this worker's user sets it with a flag,
  // so it is bad flags (exit 2: a launcher does not restart it).
  absl::Status st = ddp::RestateMissingGradientAdvice(
      f.status,
      "Every parameter must get a gradient in every step unless --find-unused-parameters is given (--skip-layer "
      "and --skip-block leave layers without one): pass --find-unused-parameters.");
  const bool own_cause = st.message() != f.status.message();
  if (own_cause) st = WithExitCode(st, kExitBadInput);
  // The client's reader may learn why (an ABORT, the stream lost) a moment
  // after the data plane failed, so give it a short while: the mailbox wakes
  // us as soon as it knows. Not for this rank's own cause: the ABORT its
  // peers' failures bring would only hide it.
  const absl::Status control_failure =
      own_cause ? absl::OkStatus() : ctx_.plans->WaitForFailure(std::chrono::seconds(3));
  WorkerExit e = FailedIteration(st, control_failure, f.iteration, f.where);
  result_.exit_code = e.code;
  result_.reason = std::move(e.reason);
  return result_;
}

TrainResult TrainLoop::Stopped(int64_t last_step) {
  result_.exit_code = kExitOk;
  result_.regroup = window_.regroup();
  result_.reason = absl::StrCat("stopped after iteration ", last_step, " (", last_step + 1, " steps)",
                                result_.regroup ? " for the next generation" : "",
                                window_.stop_reason().empty() ? "" : ": ", window_.stop_reason());
  return result_;
}

absl::Status TrainLoop::TakePlans(int64_t through, int64_t step) {
  if (window_.next() > through) return absl::OkStatus();
  TraceWriter::Scope span(ctx_.trace, "wait plan", "control", TraceWriter::kControl,
                          {{"iterations", absl::StrCat(window_.next(), "..", through)}, {"step", std::to_string(step)}});
  // An ABORT fails the wait, and so does a coordinator that did not come
  // back within the grace (the mailbox closes then).
  return window_.TakeThrough(through, *ctx_.plans, opt_.timeout + opt_.coordinator_grace);
}

absl::Status TrainLoop::ApplyBucketPlan(int64_t step) {
  // A bucket plan announced earlier takes effect at its iteration boundary.
  std::optional<IterationPlan> bp = window_.TakeBucketPlanFor(step);
  if (!bp) return absl::OkStatus();
  PSYNC_RETURN_IF_ERROR(reducer_.ApplyBucketPlan(*bp->bucket_plan));
  if (ctx_.trace) {
    ctx_.trace->Instant(absl::StrCat("bucket plan ", bp->bucket_plan_id), "control", TraceWriter::kControl,
                        Clock::now(), {{"buckets", std::to_string(bp->bucket_plan->size())},
                                       {"iteration", std::to_string(step)}});
  }
  PSYNC_LOG(DEBUG) << "applied bucket plan " << bp->bucket_plan_id << " (" << bp->bucket_plan->size()
                   << " buckets) at iteration " << step;
  return absl::OkStatus();
}

absl::StatusOr<double> TrainLoop::ForwardBackward(int64_t step, const data::StepBatches& batches) {
  ddp::DistributedDataParallel& ddp = *ctx_.ddp;
  const int64_t M = opt_.accumulate;
  const float micro_scale = 1.0f / static_cast<float>(M);
  std::vector<uint8_t> used(reducer_.parameters().size(), opt_.find_unused_parameters ? 0 : 1);
  double step_loss = 0;
  int64_t activation_bytes = 0;  // the most one micro-batch's forward left held (TrainResult)
  for (int64_t m = 0; m < M; ++m) {
    const data::Batch& batch = batches.micro[static_cast<size_t>(m)];
    const Tensor inputs = batch.inputs.To(ctx_.device);
    const bool skip = opt_.skip.Active(step, m, M);
    std::optional<ddp::NoSync> no_sync;
    if (m + 1 < M) no_sync.emplace(ddp.NoSync());

    absl::StatusOr<autograd::Variable> loss;
    const int64_t in_use = TensorBytesInUse(ctx_.device);
    {
      TraceWriter::Scope span(ctx_.trace, "forward", "train", TraceWriter::kMain,
                              {{"iteration", std::to_string(step)}, {"micro", std::to_string(m)},
                               {"skip", skip ? "true" : "false"}});
      loss = ddp.Forward([&]() -> autograd::Variable {
        autograd::Variable out = ctx_.model->Forward(autograd::Variable(inputs), skip ? skip_set_ : std::set<int>{});
        test_kill::At("forward");
        return autograd::Scale(Loss(task_, out, batch.targets, micro_scale), micro_scale);
      });
    }
    if (!loss.ok()) return loss.status();
    activation_bytes = std::max(activation_bytes, TensorBytesInUse(ctx_.device) - in_use);
    if (opt_.find_unused_parameters) {
      for (const auto& acc : autograd::ReachableAccumulators({*loss})) {
        auto it = param_of_accumulator_.find(acc.get());
        if (it != param_of_accumulator_.end()) used[it->second] = 1;
      }
    }
    if (m + 1 == M) {
      // Report right after the synchronised forward: the plan's round trip
      // overlaps this backward.
      std::vector<size_t> ready_order;
      if (ctx_.rank == 0 && step == 1) ready_order = reducer_.recorded_ready_order();
      PSYNC_RETURN_IF_ERROR(ctx_.reports->SendReport(step, used, step == 0 ? 0.0 : prev_loss_, last_step_ms_,
                                                     ready_order, rank_tokens_per_s_));
    }
    {
      TraceWriter::Scope span(ctx_.trace, "backward", "train", TraceWriter::kMain,
                              {{"iteration", std::to_string(step)}, {"micro", std::to_string(m)}});
      PSYNC_RETURN_IF_ERROR(autograd::Backward(*loss));
    }
    step_loss += loss->data().Item();
  }
  result_.activation_bytes = activation_bytes;
  return step_loss;
}

absl::Status TrainLoop::OptimizerStep(int64_t step, StepMetrics* m) {
  TraceWriter::Scope span(ctx_.trace, "optimizer step", "train", TraceWriter::kMain,
                          {{"iteration", std::to_string(step)}});
  if (opt_.clip_grad_norm > 0) {
    // The gradients are averaged over the ranks already (finalize), so every
    // rank computes the same norm (a sharded optimizer combines its shards').
    absl::StatusOr<double> norm = ctx_.optimizer->ClipGradNorm(opt_.clip_grad_norm);
    if (!norm.ok()) return norm.status();
    m->grad_norm = *norm;
  }
  m->lr = ctx_.schedule->At(step);
  PSYNC_RETURN_IF_ERROR(ctx_.optimizer->Step(m->lr));
  ctx_.optimizer->ZeroGrad(/*set_to_none=*/true);
  ops::Synchronize(ctx_.device);
  return absl::OkStatus();
}

absl::Status TrainLoop::Evaluate(int64_t step, StepMetrics* m) {
  TraceWriter::Scope span(ctx_.trace, "evaluate", "train", TraceWriter::kMain, {{"iteration", std::to_string(step)}});
  // --zero: the last step's parameter all-gathers land first.
  PSYNC_RETURN_IF_ERROR(reducer_.WaitForParameters());
  EvalOptions eo;
  eo.batch = opt_.eval_batch;
  eo.max_examples = opt_.eval_examples;
  eo.timeout = opt_.timeout;
  absl::StatusOr<EvalResult> r = EvaluateSharded(*ctx_.model, *ctx_.val, ctx_.device, ctx_.group, eo);
  if (!r.ok()) return r.status();
  m->val_loss = result_.val_loss = r->loss;
  m->val_accuracy = result_.val_accuracy = r->accuracy;
  last_evaluated_ = step;
  return absl::OkStatus();
}

void TrainLoop::PrintProgress(int64_t step, const StepMetrics& m, Clock::time_point now) {
  const bool due = opt_.progress_every > 0 && ((step + 1) % opt_.progress_every == 0 || step + 1 == opt_.steps);
  if (ctx_.rank != 0 || opt_.quiet || !(due || std::isfinite(m.val_loss))) return;
  // Rates from the median of the last StepTimes::kWindow steps (robust to
  // a slow step; bounded work however long the run).
  const double median_ms = result_.step_ms.RecentMedian();
  const double eta = median_ms * static_cast<double>(opt_.steps - step - 1) / 1000.0;
  std::string line = absl::StrFormat("step %d/%d | loss %.4f", step + 1, opt_.steps, m.loss);
  if (std::isfinite(m.val_loss)) absl::StrAppendFormat(&line, " | val %.4f", m.val_loss);
  if (std::isfinite(m.val_accuracy)) absl::StrAppendFormat(&line, " (acc %.2f%%)", 100.0 * m.val_accuracy);
  absl::StrAppendFormat(&line, " | lr %.2e", m.lr);
  if (std::isfinite(m.grad_norm)) absl::StrAppendFormat(&line, " | norm %.3f", m.grad_norm);
  absl::StrAppendFormat(&line, " | %.0f %s/s | %.1f ms/step | ETA %s", items_per_step_ / (median_ms / 1000.0),
                        task_ == data::Task::kLanguageModel ? "tok" : "ex", median_ms, Duration(eta));
  absl::StrAppendFormat(&line, " | %s elapsed", Duration(std::chrono::duration<double>(now - start_).count()));
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::optional<TrainLoop::Failure> TrainLoop::BeforeStep(int64_t step, bool* stop) {
  // The plans this step needs (Plan{step-K}); a stop announced in them ends
  // the run before this step, on every rank alike.
  if (absl::Status st = TakePlans(window_.NeededBeforeStep(step), step); !st.ok()) {
    return Failure{st, step, "waiting for the coordinator's plan"};
  }
  *stop = window_.StopsBefore(step);
  if (*stop) {
    if (absl::Status st = TakePlans(step - 1, step); !st.ok()) {
      return Failure{st, step - 1, "waiting for the coordinator's last plans"};
    }
    return std::nullopt;
  }
  if (ctx_.trace && step > 0 && ctx_.plans->latest() < step - 1) {
    ctx_.trace->Instant("ahead of plans", "control", TraceWriter::kControl, Clock::now(),
                        {{"step", std::to_string(step)}, {"latest_plan", std::to_string(ctx_.plans->latest())}});
  }
  if (absl::Status st = ApplyBucketPlan(step); !st.ok()) {
    return Failure{st, step, "applying the coordinator's bucket plan"};
  }
  return std::nullopt;
}

std::optional<TrainLoop::Failure> TrainLoop::Step(int64_t step, data::Prefetcher& prefetch, Clock::time_point t0) {
  absl::StatusOr<data::StepBatches> batches;
  {
    TraceWriter::Scope span(ctx_.trace, "wait data", "train", TraceWriter::kMain, {{"iteration", std::to_string(step)}});
    batches = prefetch.Next();
  }
  if (!batches.ok()) return Failure{WithExitCode(batches.status(), kExitBadInput), step, "reading the data"};
  // The step check (ddp/step_check.h) compares this across the ranks in
  // the first bucket: a rank that skipped or repeated a backward is named.
  reducer_.DeclareIteration(step);
  test_kill::SetIteration(step);
  absl::StatusOr<double> loss = ForwardBackward(step, *batches);
  if (!loss.ok()) return Failure{loss.status(), step, "forward/backward"};

  StepMetrics m;
  m.step = step + 1;
  m.loss = *loss;
  if (absl::Status st = OptimizerStep(step, &m); !st.ok()) return Failure{st, step, "optimizer step"};
  test_kill::At("step");
  const auto t1 = Clock::now();
  last_step_ms_ = Ms(t1 - t0);
  prev_loss_ = *loss;
  result_.step_ms.Add(last_step_ms_);
  result_.steps_completed = step + 1;
  result_.final_loss = *loss;
  m.step_ms = last_step_ms_;
  m.tokens_per_s = items_per_step_ / (last_step_ms_ / 1000.0);
  // Why / world: the global batch is split evenly over the ranks (worker_flags checks it divides).
  rank_tokens_per_s_ = m.tokens_per_s / ctx_.world_size;
  if (step + 1 == opt_.steps) {
    last_step_metrics_ = m;
    return std::nullopt;
  }
  // Why the checkpoint before the evaluation: an evaluation that fails
  // (held-out data, a lost peer) then loses no step.
  if (ctx_.save_checkpoint && opt_.checkpoint_every > 0 && (step + 1) % opt_.checkpoint_every == 0) {
    if (absl::Status st = SaveCheckpoint(step + 1); !st.ok()) return Failure{st, step, "writing a checkpoint"};
  }
  if (EvaluatesAfter(step)) {
    if (absl::Status st = Evaluate(step, &m); !st.ok()) return Failure{st, step, "evaluation"};
  }
  WriteMetrics(step, m);
  return std::nullopt;
}

std::optional<TrainLoop::Failure> TrainLoop::AfterLastStep() {
  // Before Done: the plans of the last steps (the coordinator closes every
  // iteration this rank reported; a stop announced there changes nothing).
  const int64_t last = result_.steps_completed - 1;
  // --zero: the last step's parameter all-gathers (the weights --save writes).
  if (absl::Status st = reducer_.WaitForParameters(); !st.ok()) return Failure{st, last, "gathering the parameters"};
  if (absl::Status st = TakePlans(last, last + 1); !st.ok()) {
    return Failure{st, last, "waiting for the coordinator's last plans"};
  }
  // The end of the run, or a stop (psyncctl shutdown): a checkpoint a later
  // --resume continues from. Before the final evaluation, so an evaluation
  // that fails loses nothing (--save is written then too: `trained`).
  if (ctx_.save_checkpoint && result_.steps_completed > ctx_.first_step && last_checkpoint_ != result_.steps_completed) {
    if (absl::Status st = SaveCheckpoint(result_.steps_completed); !st.ok()) {
      return Failure{st, last, "writing the final checkpoint"};
    }
  }
  result_.trained = true;
  // A run stopped early is evaluated on what it learned, on every rank alike
  // (not a regroup: the job goes on).
  const bool regroup = window_.regroup() && window_.StopsBefore(result_.steps_completed);
  StepMetrics m = last_step_metrics_.value_or(StepMetrics{});
  if (ctx_.val != nullptr && last >= 0 && last_evaluated_ != last && !regroup) {
    if (absl::Status st = Evaluate(last, &m); !st.ok()) return Failure{st, last, "the final evaluation"};
  }
  if (last_step_metrics_) WriteMetrics(last, m);
  return std::nullopt;
}

TrainResult TrainLoop::Run() {
  start_ = Clock::now();
  data::Prefetcher::Options po;
  po.rank = ctx_.rank;
  po.world_size = ctx_.world_size;
  po.accumulate = opt_.accumulate;
  po.global_batch = opt_.global_batch;
  po.first_step = ctx_.first_step;
  po.end_step = opt_.steps;
  data::Prefetcher prefetch(*ctx_.train, po);

  result_.steps_completed = ctx_.first_step;
  for (int64_t step = ctx_.first_step; step < opt_.steps; ++step) {
    const auto t0 = Clock::now();  // a step's time includes waiting for its plans
    bool stop = false;
    if (std::optional<Failure> f = BeforeStep(step, &stop)) return Fail(*f);
    if (stop) break;
    if (std::optional<Failure> f = Step(step, prefetch, t0)) return Fail(*f);
  }
  if (std::optional<Failure> f = AfterLastStep()) return Fail(*f);
  result_.items_per_s = items_per_step_ / (result_.step_ms.Median() / 1000.0);
  if (window_.StopsBefore(result_.steps_completed)) return Stopped(window_.stop_after());
  result_.exit_code = kExitOk;
  result_.reason = absl::StrCat("completed ", result_.steps_completed, " steps");
  return result_;
}

}  // namespace

TrainResult Train(const TrainContext& ctx) { return TrainLoop(ctx).Run(); }

}  // namespace psync::runtime
