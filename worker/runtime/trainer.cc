#include "worker/runtime/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "worker/autograd/engine.h"
#include "worker/autograd/functions.h"
#include "worker/nn/loss.h"
#include "common/status_macros.h"
#include "worker/optim/sgd.h"
#include "worker/runtime/plan_window.h"
#include "worker/runtime/sharding.h"
#include "worker/tensor/ops.h"

namespace psync::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Reducer events -> trace: bucket launch (instant on main), bucket reduction
// (span on comm, launch to observed completion), finalize (span on main).
class TraceObserver : public ddp::ReducerObserver {
 public:
  explicit TraceObserver(TraceWriter* trace) : trace_(trace) {}
  void OnBucketLaunched(int64_t iteration, const ddp::BucketTrace& b) override {
    trace_->Instant(absl::StrCat("launch bucket ", b.bucket), "ddp", TraceWriter::kMain, b.launch,
                    {{"iteration", std::to_string(iteration)}, {"bytes", std::to_string(b.bytes)},
                     {"params", std::to_string(b.num_params)}});
  }
  void OnBucketCompleted(int64_t iteration, const ddp::BucketTrace& b) override {
    trace_->Complete(absl::StrCat("allreduce bucket ", b.bucket), "comm", TraceWriter::kComm, b.launch, b.complete,
                     {{"iteration", std::to_string(iteration)}, {"bytes", std::to_string(b.bytes)},
                      {"params", std::to_string(b.num_params)}});
    trace_->Instant(absl::StrCat("bucket ", b.bucket, " complete"), "ddp", TraceWriter::kMain, b.complete,
                    {{"iteration", std::to_string(iteration)}});
  }
  void OnIterationFinalized(const ddp::IterationTrace& t) override {
    if (t.finalize_begin.time_since_epoch().count() == 0) return;
    trace_->Complete("finalize", "ddp", TraceWriter::kMain, t.finalize_begin, t.finalize_end,
                     {{"iteration", std::to_string(t.iteration)}, {"synced", t.synced ? "true" : "false"},
                      {"locally_unused", std::to_string(t.locally_unused)},
                      {"globally_unused", std::to_string(t.globally_unused)},
                      {"rebuilt_buckets", t.rebuilt_buckets ? "true" : "false"}});
  }

 private:
  TraceWriter* trace_;
};

// One span per AccumulateGrad node (the engine's node observer).
class AccumulateGradTracer {
 public:
  explicit AccumulateGradTracer(TraceWriter* trace) : trace_(trace) {
    autograd::Engine::Get().SetNodeObserver([this](const autograd::Node& node, bool begin) { Observe(node, begin); });
  }
  ~AccumulateGradTracer() { autograd::Engine::Get().SetNodeObserver(nullptr); }

 private:
  void Observe(const autograd::Node& node, bool begin) {
    if (node.priority() != autograd::kAccumulateGradPriority) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (begin) {
      started_[&node] = Clock::now();
      return;
    }
    auto it = started_.find(&node);
    if (it == started_.end()) return;
    trace_->Complete(node.name(), "autograd", TraceWriter::kAutograd, it->second, Clock::now());
    started_.erase(it);
  }
  TraceWriter* trace_;
  std::mutex mu_;
  std::unordered_map<const autograd::Node*, Clock::time_point> started_;
};

}  // namespace

TrainResult Train(const TrainContext& ctx) {
  const WorkerOptions& opt = *ctx.options;
  TrainResult result;
  result.final_loss = std::numeric_limits<double>::quiet_NaN();
  ddp::DistributedDataParallel& ddp = *ctx.ddp;
  ddp::Reducer& reducer = ddp.reducer();
  const std::vector<autograd::Variable>& params = reducer.parameters();
  const size_t num_params = params.size();

  std::unordered_map<const autograd::Node*, size_t> param_of_accumulator;
  for (size_t p = 0; p < num_params; ++p) param_of_accumulator[params[p].grad_accumulator().get()] = p;

  TraceWriter* trace = ctx.trace;
  std::optional<AccumulateGradTracer> acc_tracer;
  if (trace && trace->enabled()) {
    reducer.SetObserver(std::make_shared<TraceObserver>(trace));
    acc_tracer.emplace(trace);
  }

  optim::OptimizerOptions sgd_options;
  sgd_options.momentum = opt.momentum;
  sgd_options.weight_decay = opt.weight_decay;
  optim::SGD sgd(ctx.model->named_parameters(), sgd_options);
  BatchGeometry geom{opt.global_batch, ctx.world_size, opt.accumulate, ctx.data->rows};
  const float micro_scale = 1.0f / static_cast<float>(opt.accumulate);

  // Classifies a failed iteration: ABORT from the coordinator (4), the
  // coordinator gone (5), a collective that failed because a peer died (4),
  // anything else (1). The reader thread may learn the cause a moment after
  // the data plane failed, so give it a short while.
  auto fail = [&](const absl::Status& st, int64_t iteration, const char* where) {
    auto deadline = Clock::now() + std::chrono::seconds(3);
    while (Clock::now() < deadline) {
      if (ctx.plans->abort_plan() || !ctx.plans->closed_status().ok() ||
          (ctx.fatal_code && ctx.fatal_code->load() != 0)) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (std::optional<IterationPlan> ab = ctx.plans->abort_plan()) {
      result.exit_code = kExitPeerLost;
      result.reason = absl::StrCat("job aborted at iteration ", iteration, ": ",
                                   ab->reason.empty() ? "aborted by the coordinator" : ab->reason);
    } else if (absl::Status closed = ctx.plans->closed_status(); !closed.ok()) {
      result.exit_code = kExitCoordinatorLost;
      result.reason = absl::StrCat("coordinator lost at iteration ", iteration, ": ", std::string(closed.message()));
    } else if (st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kDeadlineExceeded ||
               st.code() == absl::StatusCode::kAborted) {
      result.exit_code = kExitPeerLost;
      result.reason = absl::StrCat("iteration ", iteration, " failed in ", where, " (a peer was lost?): ",
                                   std::string(st.message()));
    } else {
      result.exit_code = kExitInternal;
      result.reason = absl::StrCat("iteration ", iteration, " failed in ", where, ": ", std::string(st.message()));
    }
    return result;
  };

  const auto start = Clock::now();
  auto last_print = start;
  int64_t last_print_step = 0;
  double last_step_ms = 0;
  double prev_loss = 0;
  PlanWindow window(ctx.plan_lookahead);
  const std::set<int> skip_set = opt.skip_layer >= 0 ? std::set<int>{opt.skip_layer} : std::set<int>{};

  // Takes (waits for, then releases) every plan through `through`, in order.
  auto take_plans = [&](int64_t through, int64_t step) -> absl::Status {
    while (window.next() <= through) {
      const int64_t it = window.next();
      absl::StatusOr<IterationPlan> plan;
      {
        TraceWriter::Scope span(trace, "wait plan", "control", TraceWriter::kControl,
                                {{"iteration", std::to_string(it)}, {"step", std::to_string(step)}});
        plan = ctx.plans->Wait(it, opt.timeout);
      }
      if (!plan.ok()) return plan.status();
      if (plan->action == PlanAction::kAbort) return absl::AbortedError(plan->reason);
      PSYNC_RETURN_IF_ERROR(window.Consume(*plan));
      ctx.plans->Release(it);
    }
    return absl::OkStatus();
  };
  auto stopped = [&](int64_t last_step) {
    result.exit_code = kExitOk;
    result.reason = absl::StrCat("stopped after iteration ", last_step, " (", last_step + 1, " steps)",
                                 window.stop_reason().empty() ? "" : ": ", window.stop_reason());
    return result;
  };

  for (int64_t step = 0; step < opt.steps; ++step) {
    const auto t0 = Clock::now();
    // The plans this step needs (Plan{step-K}); a stop announced in them ends
    // the run before this step, on every rank alike.
    if (absl::Status st = take_plans(window.NeededBeforeStep(step), step); !st.ok()) {
      return fail(st, step, "waiting for the coordinator's plan");
    }
    if (window.StopsBefore(step)) {
      if (absl::Status st = take_plans(step - 1, step); !st.ok()) {
        return fail(st, step - 1, "waiting for the coordinator's last plans");
      }
      return stopped(step - 1);
    }
    if (trace && step > 0 && ctx.plans->latest() < step - 1) {
      trace->Instant("ahead of plans", "control", TraceWriter::kControl, Clock::now(),
                     {{"step", std::to_string(step)}, {"latest_plan", std::to_string(ctx.plans->latest())}});
    }
    // A bucket plan announced earlier takes effect at its iteration boundary.
    if (std::optional<IterationPlan> bp = window.TakeBucketPlanFor(step)) {
      absl::Status st = reducer.ApplyBucketPlan(*bp->bucket_plan);
      if (!st.ok()) return fail(st, step, "applying the coordinator's bucket plan");
      if (trace) trace->Instant(absl::StrCat("bucket plan ", bp->bucket_plan_id), "control",
                                TraceWriter::kControl, Clock::now(),
                                {{"buckets", std::to_string(bp->bucket_plan->size())},
                                 {"iteration", std::to_string(step)}});
      PSYNC_LOG(DEBUG) << "applied bucket plan " << bp->bucket_plan_id << " (" << bp->bucket_plan->size()
                       << " buckets) at iteration " << step;
    }

    std::vector<uint8_t> used(num_params, opt.find_unused_parameters ? 0 : 1);
    double step_loss = 0;
    for (int64_t m = 0; m < opt.accumulate; ++m) {
      Tensor x, y;
      GatherRows(*ctx.data, MicroBatchRows(geom, step, ctx.rank, m), ctx.device, &x, &y);
      const bool skip = opt.SkipActive(step, m);
      std::optional<ddp::NoSync> no_sync;
      if (m + 1 < opt.accumulate) no_sync.emplace(ddp.NoSync());

      absl::StatusOr<autograd::Variable> out;
      autograd::Variable loss;
      {
        TraceWriter::Scope span(trace, "forward", "train", TraceWriter::kMain,
                                {{"iteration", std::to_string(step)}, {"micro", std::to_string(m)},
                                 {"skip", skip ? "true" : "false"}});
        out = ddp.Forward([&]() -> autograd::Variable {
          autograd::Variable pred = ctx.model->Forward(autograd::Variable(x), skip ? skip_set : std::set<int>{});
          return autograd::Scale(nn::MseLoss(pred, y), micro_scale);
        });
      }
      if (!out.ok()) return fail(out.status(), step, "forward");
      loss = *out;
      if (opt.find_unused_parameters) {
        for (const auto& acc : autograd::ReachableAccumulators({loss})) {
          auto it = param_of_accumulator.find(acc.get());
          if (it != param_of_accumulator.end()) used[it->second] = 1;
        }
      }
      if (m + 1 == opt.accumulate) {
        // Report right after the synchronised forward: the plan's round trip
        // overlaps this backward.
        std::vector<size_t> ready_order;
        if (ctx.rank == 0 && step == 1) ready_order = reducer.recorded_ready_order();
        absl::Status st = ctx.reports->SendReport(step, used, step == 0 ? 0.0 : prev_loss, last_step_ms, ready_order);
        if (!st.ok()) return fail(st, step, "sending the report");
      }
      absl::Status bst;
      {
        TraceWriter::Scope span(trace, "backward", "train", TraceWriter::kMain,
                                {{"iteration", std::to_string(step)}, {"micro", std::to_string(m)}});
        bst = autograd::Backward(loss);
      }
      if (!bst.ok()) return fail(bst, step, "backward");
      step_loss += loss.data().Item();
    }

    {
      TraceWriter::Scope span(trace, "optimizer step", "train", TraceWriter::kMain,
                              {{"iteration", std::to_string(step)}});
      absl::Status st = sgd.Step(opt.lr);
      if (!st.ok()) return fail(st, step, "optimizer step");
      sgd.ZeroGrad(/*set_to_none=*/true);
      ops::Synchronize(ctx.device);
    }
    const auto t1 = Clock::now();
    last_step_ms = Ms(t1 - t0);
    prev_loss = step_loss;
    result.step_ms.push_back(last_step_ms);
    result.losses.push_back(step_loss);
    result.steps_completed = step + 1;
    result.final_loss = step_loss;

    if (ctx.rank == 0 && !opt.quiet && opt.progress_every > 0 &&
        ((step + 1) % opt.progress_every == 0 || step + 1 == opt.steps)) {
      const double secs = std::chrono::duration<double>(t1 - last_print).count();
      const double rate = secs > 0 ? static_cast<double>(step + 1 - last_print_step) / secs : 0.0;
      std::printf("step %lld/%lld  loss %.6f  %.1f steps/s  %.2f ms/step\n", static_cast<long long>(step + 1),
                  static_cast<long long>(opt.steps), step_loss, rate, last_step_ms);
      std::fflush(stdout);
      last_print = t1;
      last_print_step = step + 1;
    }
  }
  // Before Done: the plans of the last steps (the coordinator closes every
  // iteration this rank reported; a stop announced there changes nothing).
  if (absl::Status st = take_plans(opt.steps - 1, opt.steps); !st.ok()) {
    return fail(st, opt.steps - 1, "waiting for the coordinator's last plans");
  }
  if (window.StopsBefore(opt.steps)) return stopped(window.stop_after());
  result.exit_code = kExitOk;
  result.reason = absl::StrCat("completed ", result.steps_completed, " steps");
  return result;
}

}  // namespace psync::runtime
