// Plans from the coordinator, as the trainer and the reducer consume them.
//
// The coordinator answers every iteration's Report with one Plan (the
// globally unused parameters, maybe a new bucket plan, and an action). A
// reader thread delivers them into a PlanMailbox; the trainer waits for the
// plan of the iteration it is finishing, and the reducer (with
// find_unused_parameters) asks for the same plan's unused set in finalize
// through CoordinatorUnusedSource, so the coordinator's round trip overlaps
// backward and every rank applies the same set.
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
};

// Bit p of `bitmap` (byte p/8, bit p%8, LSB first) as bytes 0/1, for `n` parameters.
std::vector<uint8_t> UnpackBitmap(const std::string& bitmap, size_t n);
// Inverse: one byte per parameter (non-zero = set) to ceil(n/8) bytes.
std::string PackBitmap(const std::vector<uint8_t>& bytes);

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

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, IterationPlan> plans_;
  std::optional<IterationPlan> abort_;
  absl::Status closed_ = absl::OkStatus();
  bool is_closed_ = false;
};

// The reducer's UnusedParameterSource over the coordinator's plans.
class CoordinatorUnusedSource : public ddp::UnusedParameterSource {
 public:
  explicit CoordinatorUnusedSource(std::shared_ptr<PlanMailbox> mailbox) : mailbox_(std::move(mailbox)) {}
  // The trainer reports the used bitmap itself, right after forward (so the
  // round trip overlaps backward); the reducer's copy is only kept for checks.
  void Submit(int64_t iteration, const std::vector<uint8_t>& local_used) override;
  absl::StatusOr<std::vector<uint8_t>> GlobalUsed(int64_t iteration, std::chrono::milliseconds timeout) override;

 private:
  std::shared_ptr<PlanMailbox> mailbox_;
};

}  // namespace psync::runtime
