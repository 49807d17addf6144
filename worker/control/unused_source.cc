#include "worker/control/unused_source.h"

namespace psync::control {

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

}  // namespace psync::control
