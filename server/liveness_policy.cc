#include "server/liveness_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace psync::server {

std::string DurationText(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return absl::StrCat(ms.count() / 1000, "s");
  return absl::StrCat(ms.count(), "ms");
}

std::optional<LostVerdict> JudgeLiveness(const std::vector<RankActivity>& ranks, const LivenessParams& params,
                                         std::chrono::steady_clock::time_point now,
                                         std::chrono::steady_clock::time_point world_complete_time,
                                         std::chrono::steady_clock::time_point last_plan_time,
                                         int64_t pending_iteration) {
  using Phase = RankActivity::Phase;
  const int n = static_cast<int>(ranks.size());
  // Rule 0.
  for (int r = 0; r < n; ++r) {
    if (ranks[static_cast<size_t>(r)].phase == Phase::kJoined && now - world_complete_time > params.report_timeout) {
      return LostVerdict{r, absl::StrCat("no Train stream within ", DurationText(params.report_timeout),
                                         " of the world completing")};
    }
  }
  // Rule 1: the TRAINING rank silent longest, if beyond heartbeat_timeout.
  int silent = -1;
  bool quiet = false;
  const auto quiet_after = 2 * params.heartbeat_interval;  // two heartbeats missed
  for (int r = 0; r < n; ++r) {
    const RankActivity& a = ranks[static_cast<size_t>(r)];
    if (a.phase != Phase::kTraining) continue;
    const auto unheard = now - a.last_heard;
    if (unheard > quiet_after) quiet = true;
    if (unheard > params.heartbeat_timeout &&
        (silent < 0 || a.last_heard < ranks[static_cast<size_t>(silent)].last_heard)) {
      silent = r;
    }
  }
  if (silent >= 0) {
    const auto unheard = std::chrono::duration_cast<std::chrono::milliseconds>(
        now - ranks[static_cast<size_t>(silent)].last_heard);
    return LostVerdict{silent, absl::StrCat("no message (heartbeat or report) for ", DurationText(unheard),
                                            ", beyond the heartbeat timeout of ",
                                            DurationText(params.heartbeat_timeout),
                                            " (process or connection gone) at iteration ", pending_iteration)};
  }
  // Rule 2, only while no rank is quiet.
  if (quiet) return std::nullopt;
  for (int r = 0; r < n; ++r) {
    const RankActivity& a = ranks[static_cast<size_t>(r)];
    if (a.phase != Phase::kTraining || a.reported_pending) continue;
    const auto since = std::max(a.last_activity, last_plan_time);
    if (now - since > params.report_timeout) {
      return LostVerdict{r, absl::StrCat("no report for iteration ", pending_iteration, " within ",
                                         DurationText(params.report_timeout), " (still heartbeating)")};
    }
  }
  return std::nullopt;
}

}  // namespace psync::server
