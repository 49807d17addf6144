// PlanWindow: when the trainer needs which coordinator plan, with plan
// lookahead K (coordinator.proto, "Plan lookahead"; JoinResult::plan_lookahead).
//
//   - Before step j: every plan through j-K (so the trainer runs up to K
//     steps ahead of the coordinator and a slow plan does not stall it). A
//     stop or bucket plan is announced K iterations ahead, so it is always
//     known in time: a bucket plan in Plan{e} applies from e+K, a stop after
//     s is announced in Plan{s-K+1} at the latest.
//   - With find_unused_parameters, the reducer additionally reads Plan{j}
//     in step j's finalize (the unused set); that is not this class's business.
//   - After the last step (or a stop): every plan through the last reported
//     iteration, before Done, so the coordinator has closed every iteration
//     this rank took part in.
// Plans are consumed strictly in iteration order. Not thread-safe (the
// training thread owns it).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "worker/control/plan_mailbox.h"

namespace psync::control {

class PlanWindow {
 public:
  // `first_iteration`: the iteration training starts at (its plan is the first one).
  explicit PlanWindow(int lookahead, int64_t first_iteration = 0);

  int lookahead() const { return k_; }
  // The last plan needed before starting `step` (-1 = none).
  int64_t NeededBeforeStep(int64_t step) const { return step - k_; }
  // The next plan to consume (all earlier ones are consumed).
  int64_t next() const { return next_; }
  // Takes Plan{next()}: records its stop and bucket plan. InvalidArgument for
  // an out-of-order plan, a bucket plan that applies too early, or a stop
  // announced too late; ABORT plans never get here (the mailbox fails the wait).
  absl::Status Consume(const IterationPlan& plan);
  // Waits for Plan{next()} .. Plan{through} in `mailbox` (up to `timeout`
  // each), consumes them in order and releases them from the mailbox. An
  // ABORT, a lost stream or a timeout fails the wait: the mailbox's failure.
  absl::Status TakeThrough(int64_t through, PlanMailbox& mailbox, std::chrono::milliseconds timeout);

  // True when a consumed plan says every rank stops before `step`.
  bool StopsBefore(int64_t step) const { return stop_after_ >= 0 && step > stop_after_; }
  int64_t stop_after() const { return stop_after_; }  // -1 = no stop announced
  const std::string& stop_reason() const { return stop_reason_; }
  // The stop ends only this generation (an elastic job regroups): the run
  // ends with its checkpoint, without its end-of-run outputs.
  bool regroup() const { return regroup_; }
  // The bucket plan that takes effect at `step`, once (applies_from <= step).
  std::optional<IterationPlan> TakeBucketPlanFor(int64_t step);

 private:
  const int k_;
  int64_t next_ = 0;
  int64_t stop_after_ = -1;
  std::string stop_reason_;
  bool regroup_ = false;
  std::optional<IterationPlan> bucket_plan_;
};

}  // namespace psync::control
