// The reducer's UnusedParameterSource over the coordinator's plans: with
// find_unused_parameters, step j's finalize takes Plan{j}'s globally unused
// set from the mailbox (the trainer reported the used bitmap itself, right
// after forward, so the round trip overlaps backward).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/control/plan_mailbox.h"
#include "psync/ddp/unused_parameter_source.h"

namespace psync::control {

class CoordinatorUnusedSource : public ddp::UnusedParameterSource {
 public:
  explicit CoordinatorUnusedSource(std::shared_ptr<PlanMailbox> mailbox) : mailbox_(std::move(mailbox)) {}
  // The reducer's copy is only kept for checks: the trainer sends the report.
  void Submit(int64_t iteration, const std::vector<uint8_t>& local_used) override;
  absl::StatusOr<std::vector<uint8_t>> GlobalUsed(int64_t iteration, std::chrono::milliseconds timeout) override;
  // Plan{iteration} arrives while the iteration's backward runs: the reducer
  // skips buckets unused on every rank once it is there.
  bool KnowsAhead() const override { return true; }
  std::optional<std::vector<uint8_t>> TryGlobalUsed(int64_t iteration) override;

 private:
  std::shared_ptr<PlanMailbox> mailbox_;
};

}  // namespace psync::control
