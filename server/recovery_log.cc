#include "server/recovery_log.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace psync::server {

void RecoveryLog::Lost(Clock::time_point at, int64_t furthest) {
  // Why keep the first: a loss during a recovery extends that recovery; the
  // job has not computed anything since the first loss.
  if (pending_) {
    pending_->furthest = std::max(pending_->furthest, furthest);
    return;
  }
  pending_ = Pending{at, furthest};
}

std::string RecoveryLog::Formed(Clock::time_point now, int64_t start, bool in_place) {
  if (!pending_) return "";
  const Pending p = *pending_;
  pending_.reset();
  last_seconds_ = std::chrono::duration<double>(now - p.at).count();
  total_seconds_ += last_seconds_;
  const uint64_t again = p.furthest >= start ? static_cast<uint64_t>(p.furthest - start + 1) : 0;
  recomputed_ += again;
  ++(in_place ? live_ : restarted_);
  return absl::StrFormat("%s %.2f s after the loss; %d iteration%s started before it computed again",
                         in_place ? "recovered in place (live)" : "restarted", last_seconds_, again,
                         again == 1 ? "" : "s");
}

}  // namespace psync::server
