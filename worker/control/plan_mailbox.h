// Plans from the coordinator, as the trainer and the reducer consume them.
//
// The coordinator answers every iteration's Report with one Plan (the
// globally unused parameters, maybe a new bucket plan, and an action). The
// coordinator client's reader thread decodes each into an IterationPlan (the
// one plan type after decoding) and delivers it straight into the
// PlanMailbox the job session owns; the trainer takes plans in order when it
// needs them (plan_window.h: Plan{j-K} before step j) and then releases them,
// so the mailbox holds at most the plans in flight (memory stays flat over
// any number of steps). With find_unused_parameters the reducer also reads
// Plan{j}'s unused set in step j's finalize through CoordinatorUnusedSource
// (unused_source.h), so the round trip overlaps backward and every rank
// applies the same set.
//
// An ABORT plan, or the end of the stream (Close), is the mailbox's failure:
// it fails every wait from then on, carries its exit code (include/psync/common/exit_code.h:
// 4 for an ABORT, the client's code for a closed stream), and wakes
// WaitForFailure (the trainer classifying a failed step; the failure
// watchdog).
//
// Threads: Deliver and Close come from the client's reader thread; the rest
// from the training thread and the watchdog. mu_ guards everything.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/ddp/bucket_assignment.h"

namespace psync::control {

enum class PlanAction { kContinue, kStopAfter, kAbort };
const char* PlanActionName(PlanAction a);

// One iteration's Plan (coordinator.proto), decoded.
struct IterationPlan {
  int64_t iteration = 0;
  std::vector<uint8_t> globally_unused;  // one byte per parameter (1 = unused on every rank)
  std::optional<ddp::BucketPlan> bucket_plan;
  int64_t bucket_plan_id = 0;  // 0 = initial (reverse manifest order), 1 = from rank 0's ready order
  int64_t applies_from = 0;    // with bucket_plan: the iteration it takes effect at
  PlanAction action = PlanAction::kContinue;
  std::string reason;
  int64_t stop_after = -1;  // with kStopAfter: every rank stops after this iteration
  bool regroup = false;     // with kStopAfter: the stop ends this generation only (Plan.regroup)
  // With kAbort under live recovery: stay and Join this generation
  // in-process (Plan.rejoin_generation); 0 = exit.
  int64_t rejoin_generation = 0;
};

class PlanMailbox {
 public:
  // From the reader thread: a plan arrived. An ABORT plan (any iteration)
  // is the mailbox's failure.
  void Deliver(IterationPlan plan);
  // From the reader thread: no more plans will come (stream ended,
  // coordinator lost); `why` is the failure (OK: "coordinator stream ended").
  void Close(absl::Status why);

  // From the reader thread (coordinator failover): the stream broke and is
  // being opened again. Meanwhile a finite WaitForFailure does not time out
  // (the coordinator that takes over decides what a failed step was: a
  // peer lost while it was down is its ABORT to give); once reconnected it
  // waits its timeout again.
  void SetReconnecting(bool on);

  // Waits for the plan of `iteration`. Errors: an ABORT (Aborted with the
  // coordinator's reason), the stream closed (its status), timeout
  // (DeadlineExceeded), a released iteration (FailedPrecondition).
  absl::StatusOr<IterationPlan> Wait(int64_t iteration, std::chrono::milliseconds timeout);
  // Drops the plans of iterations <= `iteration` (the trainer consumed them;
  // the reducer only ever reads a later one). Later Waits for them fail.
  void Release(int64_t iteration);

  // Why no more plans will come (OK while all is well): the ABORT plan's
  // reason (Aborted, exit code 4) or the status Close was given.
  absl::Status failure() const;
  // Blocks until failure() is set (returns it), `timeout` passed (not
  // counting time spent reconnecting: SetReconnecting) or, after a
  // Wake(), `cancelled` returns true (both return OK). timeout = max(): no
  // deadline.
  absl::Status WaitForFailure(std::chrono::milliseconds timeout, const std::function<bool()>& cancelled = {}) const;
  // Wakes WaitForFailure callers to look at their `cancelled` again.
  void Wake() const;

  // Non-blocking: the ABORT plan seen, if any.
  std::optional<IterationPlan> abort_plan() const;
  // Non-blocking: the status Close was given (OK while open).
  absl::Status closed_status() const;
  // The highest iteration delivered so far (-1 = none).
  int64_t latest() const;
  // Plans held (delivered, not released).
  size_t held() const;

 private:
  absl::Status FailureLocked() const;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<int64_t, IterationPlan> plans_;
  std::optional<IterationPlan> abort_;
  absl::Status closed_ = absl::OkStatus();
  bool is_closed_ = false;
  int64_t released_through_ = -1;
  int64_t latest_ = -1;
  bool reconnecting_ = false;
};

}  // namespace psync::control
