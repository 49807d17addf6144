// Plans from the coordinator, as the trainer and the reducer consume them.
//
// The coordinator answers every iteration's Report with one Plan (the
// globally unused parameters, maybe a new bucket plan, and an action). A
// reader thread delivers them into a PlanMailbox; the trainer takes them in
// order when it needs them (plan_window.h: Plan{j-K} before step j) and then
// releases them, so the mailbox holds at most the plans in flight (memory
// stays flat over any number of steps). With find_unused_parameters the
// reducer also reads Plan{j}'s unused set in step j's finalize through
// CoordinatorUnusedSource, so the round trip overlaps backward and every
// rank applies the same set.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/ddp/bucket_assignment.h"
#include "worker/ddp/unused_parameter_source.h"

namespace psync::runtime {

enum class PlanAction { kContinue, kStopAfter, kAbort };
const char* PlanActionName(PlanAction a);

struct IterationPlan {
  int64_t iteration = 0;
  std::vector<uint8_t> globally_unused;  // one byte per parameter (1 = unused on every rank)
  std::optional<ddp::BucketPlan> bucket_plan;
  int64_t bucket_plan_id = 0;
  int64_t applies_from = 0;
  PlanAction action = PlanAction::kContinue;
  std::string reason;
  int64_t stop_after = -1;  // with kStopAfter: every rank stops after this iteration
};

class PlanMailbox {
 public:
  // From the reader thread: a plan arrived. An ABORT plan (any iteration)
  // also fails every later Wait with the abort reason.
  void Deliver(IterationPlan plan);
  // From the reader thread: no more plans will come (stream ended, coordinator lost).
  void Close(absl::Status why);

  // Waits for the plan of `iteration`. Errors: the stream closed (its
  // status), an ABORT (Aborted with the coordinator's reason), timeout
  // (DeadlineExceeded).
  absl::StatusOr<IterationPlan> Wait(int64_t iteration, std::chrono::milliseconds timeout);
  // Non-blocking: the ABORT plan seen, if any.
  std::optional<IterationPlan> abort_plan() const;
  absl::Status closed_status() const;
  // Drops the plans of iterations <= `iteration` (the trainer consumed them;
  // the reducer only ever reads a later one). Later Waits for them fail.
  void Release(int64_t iteration);
  // The highest iteration delivered so far (-1 = none).
  int64_t latest() const;
  // Plans held (delivered, not released).
  size_t held() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, IterationPlan> plans_;
  std::optional<IterationPlan> abort_;
  absl::Status closed_ = absl::OkStatus();
  bool is_closed_ = false;
  int64_t released_through_ = -1;
  int64_t latest_ = -1;
};

// The reducer's UnusedParameterSource over the coordinator's plans.
class CoordinatorUnusedSource : public ddp::UnusedParameterSource {
 public:
  explicit CoordinatorUnusedSource(std::shared_ptr<PlanMailbox> mailbox) : mailbox_(std::move(mailbox)) {}
  // The trainer reports the used bitmap itself, right after forward (so the
  // round trip overlaps backward); the reducer's copy is only kept for checks.
  void Submit(int64_t iteration, const std::vector<uint8_t>& local_used) override;
  absl::StatusOr<std::vector<uint8_t>> GlobalUsed(int64_t iteration, std::chrono::milliseconds timeout) override;
  // Plan{iteration} arrives while the iteration's backward runs: the reducer
  // skips buckets unused on every rank once it is there.
  bool KnowsAhead() const override { return true; }
  std::optional<std::vector<uint8_t>> TryGlobalUsed(int64_t iteration) override;

 private:
  std::shared_ptr<PlanMailbox> mailbox_;
};

}  // namespace psync::runtime
