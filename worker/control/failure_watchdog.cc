#include "worker/control/failure_watchdog.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "psync/common/exit_code.h"

namespace psync::control {

FailureWatchdog::FailureWatchdog(std::shared_ptr<PlanMailbox> mailbox, AbortFn abort, std::chrono::milliseconds grace)
    : mailbox_(std::move(mailbox)), abort_(std::move(abort)), grace_(grace), thread_([this] { Run(); }) {}

void FailureWatchdog::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  mailbox_->Wake();
  if (thread_.joinable()) thread_.join();
}

bool FailureWatchdog::stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

void FailureWatchdog::Run() {
  const absl::Status failure =
      mailbox_->WaitForFailure(std::chrono::milliseconds::max(), [this] { return stopping(); });
  if (failure.ok()) return;  // stopped first
  const int code = ExitCodeOf(failure, kExitCoordinatorLost);
  // An ABORT, or the coordinator ending the stream for one, is a peer's
  // fault (4); any other end of the stream means the coordinator is lost (5).
  const std::string reason =
      absl::StrCat(code == kExitPeerLost ? "job aborted: " : "coordinator lost: ", std::string(failure.message()));
  if (abort_) abort_(absl::AbortedError(reason));
  // The training thread normally notices within a moment and exits cleanly
  // (Stop() wakes us). Otherwise end the process.
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, grace_, [this] { return stop_; })) {
    std::fprintf(stderr, "psync-worker: %s (training thread did not stop; exiting)\n", reason.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    _exit(code);
  }
}

}  // namespace psync::control
