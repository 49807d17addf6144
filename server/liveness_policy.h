// LivenessPolicy: which rank, if any, to declare lost now. A pure function of
// what JobState knows about each rank's activity; no clock, no lock, no
// side effects, so every rule is unit-testable with made-up times.
//
// Rules, in this order (at most one rank is blamed per call):
//   0. No stream: a JOINED rank that has not opened its Train stream within
//      report_timeout of the world completing.
//   1. Silent: a TRAINING rank not heard (any Train message, heartbeats
//      included) for more than heartbeat_timeout; if several are, the one
//      silent longest. Does not wait for any report deadline.
//   2. Report deadline: a TRAINING rank that has not reported the pending
//      iteration within report_timeout (of the last plan or its own last
//      report), but only while no TRAINING rank is quiet, i.e. unheard for
//      more than two heartbeat intervals. A quiet rank is either about to
//      become silent (then rule 1 blames it) or will be heard again (then
//      rule 2 applies), so the deferral is bounded by heartbeat_timeout.
//      Ties: the lowest rank past its deadline.
// Why: when one rank's link is cut without a TCP reset, its peers block in
// the collective with it and stop reporting too; they keep heartbeating, the
// cut rank does not, so the cut rank is the one blamed (rule 1 when
// heartbeat_timeout < report_timeout, the default; else because it is quiet
// at the report deadline).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace psync::server {

struct LivenessParams {
  std::chrono::milliseconds report_timeout{60000};
  std::chrono::milliseconds heartbeat_timeout{5000};
  std::chrono::milliseconds heartbeat_interval{1000};
};

struct RankActivity {
  enum class Phase { kOther, kJoined, kTraining };
  Phase phase = Phase::kOther;
  std::chrono::steady_clock::time_point last_heard{};     // any Train message (or attach)
  std::chrono::steady_clock::time_point last_activity{};  // last report (or attach)
  bool reported_pending = false;                          // reported the pending iteration
};

struct LostVerdict {
  int rank = -1;
  std::string why;  // e.g. "no message (heartbeat or report) for 6s, beyond ..."
};

std::optional<LostVerdict> JudgeLiveness(const std::vector<RankActivity>& ranks, const LivenessParams& params,
                                         std::chrono::steady_clock::time_point now,
                                         std::chrono::steady_clock::time_point world_complete_time,
                                         std::chrono::steady_clock::time_point last_plan_time,
                                         int64_t pending_iteration);

// "5s" or "1500ms".
std::string DurationText(std::chrono::milliseconds ms);

}  // namespace psync::server
