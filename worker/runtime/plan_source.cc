#include "worker/runtime/plan_source.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace psync::runtime {

const char* PlanActionName(PlanAction a) {
  switch (a) {
    case PlanAction::kContinue: return "CONTINUE";
    case PlanAction::kStopAfter: return "STOP_AFTER";
    case PlanAction::kAbort: return "ABORT";
  }
  return "?";
}

void PlanMailbox::Deliver(IterationPlan plan) {
  std::lock_guard<std::mutex> lock(mu_);
  if (plan.action == PlanAction::kAbort) {
    if (!abort_) abort_ = std::move(plan);  // kept apart: it fails every Wait
  } else if (plan.iteration > released_through_) {
    latest_ = std::max(latest_, plan.iteration);
    plans_[plan.iteration] = std::move(plan);
  }
  cv_.notify_all();
}

void PlanMailbox::Release(int64_t iteration) {
  std::lock_guard<std::mutex> lock(mu_);
  released_through_ = std::max(released_through_, iteration);
  plans_.erase(plans_.begin(), plans_.upper_bound(iteration));
}

int64_t PlanMailbox::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

size_t PlanMailbox::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plans_.size();
}

void PlanMailbox::Close(absl::Status why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!is_closed_) {
    is_closed_ = true;
    closed_ = why.ok() ? absl::UnavailableError("coordinator stream ended") : why;
  }
  cv_.notify_all();
}

absl::StatusOr<IterationPlan> PlanMailbox::Wait(int64_t iteration, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  if (iteration <= released_through_) {
    return absl::FailedPreconditionError(absl::StrCat("the plan of iteration ", iteration,
                                                      " was already consumed and released"));
  }
  while (true) {
    auto it = plans_.find(iteration);
    if (it != plans_.end()) return it->second;
    if (abort_) return absl::AbortedError(abort_->reason.empty() ? "job aborted by the coordinator" : abort_->reason);
    if (is_closed_) return closed_;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      it = plans_.find(iteration);
      if (it != plans_.end()) return it->second;
      return absl::DeadlineExceededError(absl::StrCat("no plan for iteration ", iteration, " from the coordinator within ",
                                                      timeout.count() / 1000.0, "s"));
    }
  }
}

std::optional<IterationPlan> PlanMailbox::abort_plan() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_;
}

absl::Status PlanMailbox::closed_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return is_closed_ ? closed_ : absl::OkStatus();
}

void CoordinatorUnusedSource::Submit(int64_t, const std::vector<uint8_t>&) {}

absl::StatusOr<std::vector<uint8_t>> CoordinatorUnusedSource::GlobalUsed(int64_t iteration,
                                                                         std::chrono::milliseconds timeout) {
  absl::StatusOr<IterationPlan> plan = mailbox_->Wait(iteration, timeout);
  if (!plan.ok()) return plan.status();
  std::vector<uint8_t> used(plan->globally_unused.size());
  for (size_t p = 0; p < used.size(); ++p) used[p] = plan->globally_unused[p] ? 0 : 1;
  return used;
}

std::optional<std::vector<uint8_t>> CoordinatorUnusedSource::TryGlobalUsed(int64_t iteration) {
  absl::StatusOr<std::vector<uint8_t>> used = GlobalUsed(iteration, std::chrono::milliseconds(0));
  if (!used.ok()) return std::nullopt;
  return *std::move(used);
}

}  // namespace psync::runtime
