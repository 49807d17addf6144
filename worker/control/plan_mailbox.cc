#include "worker/control/plan_mailbox.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "psync/common/exit_code.h"

namespace psync::control {

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
    closed_ = why.ok() ? WithExitCode(absl::UnavailableError("coordinator stream ended"), kExitCoordinatorLost) : why;
  }
  cv_.notify_all();
}

absl::Status PlanMailbox::FailureLocked() const {
  if (abort_) {
    return WithExitCode(absl::AbortedError(abort_->reason.empty() ? "aborted by the coordinator" : abort_->reason),
                        kExitPeerLost);
  }
  return is_closed_ ? closed_ : absl::OkStatus();
}

absl::Status PlanMailbox::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return FailureLocked();
}

absl::Status PlanMailbox::WaitForFailure(std::chrono::milliseconds timeout,
                                         const std::function<bool()>& cancelled) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [&] { return !FailureLocked().ok() || (cancelled && cancelled()); };
  if (timeout == std::chrono::milliseconds::max()) {
    cv_.wait(lock, done);
    return FailureLocked();
  }
  while (!cv_.wait_for(lock, timeout, done) && reconnecting_) {
    // Why wait on: whoever takes over may still name the failure (an ABORT).
    cv_.wait(lock, [&] { return done() || !reconnecting_; });
  }
  return FailureLocked();
}

void PlanMailbox::SetReconnecting(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  reconnecting_ = on;
  cv_.notify_all();
}

void PlanMailbox::Wake() const {
  std::lock_guard<std::mutex> lock(mu_);
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
    if (absl::Status failed = FailureLocked(); !failed.ok()) return failed;
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

}  // namespace psync::control
