// FailureWatchdog: the worker's bound on how long it lives after the job is
// lost. When the plan mailbox fails (an ABORT plan, or the Train stream
// ended: plan_mailbox.h) it calls `abort` (the job session aborts the
// process group), so a collective the training thread is blocked in returns
// and the trainer exits with the failure's code; if the training thread
// still has not stopped the watchdog within a grace period (7 s), it ends
// the process itself (_exit) with that code, saying so on stderr: the exit
// bound holds even when a backend cannot be unblocked.
//
// Threads: the watchdog's own thread waits on the mailbox (an event, no
// polling) and then on Stop(); Stop() is for the training thread. mu_
// guards stop_.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "worker/control/plan_mailbox.h"

namespace psync::control {

class FailureWatchdog {
 public:
  using AbortFn = std::function<void(const absl::Status& reason)>;
  FailureWatchdog(std::shared_ptr<PlanMailbox> mailbox, AbortFn abort,
                  std::chrono::milliseconds grace = std::chrono::seconds(7));
  ~FailureWatchdog() { Stop(); }
  FailureWatchdog(const FailureWatchdog&) = delete;
  FailureWatchdog& operator=(const FailureWatchdog&) = delete;

  // The training thread has stopped (or the run is over): never _exit.
  // Joins the thread; idempotent.
  void Stop();

 private:
  void Run();
  bool stopping();

  std::shared_ptr<PlanMailbox> mailbox_;
  AbortFn abort_;
  const std::chrono::milliseconds grace_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the state above exists
};

}  // namespace psync::control
