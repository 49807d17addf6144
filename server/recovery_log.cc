#include "server/recovery_log.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace psync::server {

void RecoveryLog::Lost(Clock::time_point at, int64_t furthest, bool live) {
  // Why keep the first: a loss during a recovery extends that recovery; the
  // job has not computed anything since the first loss.
  if (pending_) {
    pending_->furthest = std::max(pending_->furthest, furthest);
    pending_->live = pending_->live && live;
    return;
  }
  pending_ = Pending{at, furthest, live};
}

std::string RecoveryLog::Formed(Clock::time_point now, int64_t start) {
  if (!pending_) return "";
  const Pending p = *pending_;
  pending_.reset();
  last_seconds_ = std::chrono::duration<double>(now - p.at).count();
  total_seconds_ += last_seconds_;
  const uint64_t again = p.furthest >= start ? static_cast<uint64_t>(p.furthest - start + 1) : 0;
  recomputed_ += again;
  ++(p.live ? live_ : restarted_);
  return absl::StrFormat("%s %.2f s after the loss; %d iteration%s started before it computed again",
                         p.live ? "recovered in place (live)" : "restarted", last_seconds_, again,
                         again == 1 ? "" : "s");
}

}  // namespace psync::server
