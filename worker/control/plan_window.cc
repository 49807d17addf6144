#include "worker/control/plan_window.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace psync::control {

PlanWindow::PlanWindow(int lookahead, int64_t first_iteration)
    : k_(std::max(1, lookahead)), next_(first_iteration) {}

absl::Status PlanWindow::Consume(const IterationPlan& plan) {
  if (plan.iteration != next_) {
    return absl::InvalidArgumentError(absl::StrCat("the coordinator sent the plan of iteration ", plan.iteration,
                                                   " where iteration ", next_, " was due"));
  }
  if (plan.bucket_plan) {
    // Every rank starts step iteration+K only after taking this plan, so an
    // earlier switch could happen on some ranks and not others.
    if (plan.applies_from < plan.iteration + k_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket plan ", plan.bucket_plan_id, " in the plan of iteration ", plan.iteration,
          " applies from iteration ", plan.applies_from, ", before iteration ", plan.iteration + k_,
          " that every rank can reach in step (plan lookahead ", k_, ")"));
    }
    bucket_plan_ = plan;
  }
  if (plan.action == PlanAction::kStopAfter && stop_after_ < 0) {
    if (plan.stop_after < plan.iteration || plan.stop_after > plan.iteration + k_ - 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the plan of iteration ", plan.iteration, " says stop after iteration ", plan.stop_after,
          "; with plan lookahead ", k_, " it must be in ", plan.iteration, "..", plan.iteration + k_ - 1));
    }
    stop_after_ = plan.stop_after;
  }
  if (plan.action == PlanAction::kStopAfter) {
    // Why from every stop plan: a shutdown after a regroup turns the same
    // stop into the job's end (coordinator.proto, Plan.regroup).
    stop_reason_ = plan.reason;
    regroup_ = plan.regroup;
  }
  ++next_;
  return absl::OkStatus();
}

std::optional<IterationPlan> PlanWindow::TakeBucketPlanFor(int64_t step) {
  if (!bucket_plan_ || bucket_plan_->applies_from > step) return std::nullopt;
  std::optional<IterationPlan> out = std::move(bucket_plan_);
  bucket_plan_.reset();
  return out;
}

absl::Status PlanWindow::TakeThrough(int64_t through, PlanMailbox& mailbox, std::chrono::milliseconds timeout) {
  while (next_ <= through) {
    const int64_t it = next_;
    absl::StatusOr<IterationPlan> plan = mailbox.Wait(it, timeout);
    if (!plan.ok()) return plan.status();
    if (absl::Status st = Consume(*plan); !st.ok()) return st;
    mailbox.Release(it);
  }
  return absl::OkStatus();
}

}  // namespace psync::control
