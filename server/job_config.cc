#include "server/job_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/limits.h"

namespace psync::server {

std::optional<JobConfig::Recovery> ParseRecovery(std::string_view word) {
  if (word == "live") return JobConfig::Recovery::kLive;
  if (word == "restart") return JobConfig::Recovery::kRestart;
  return std::nullopt;
}

const char* RecoveryName(JobConfig::Recovery r) { return r == JobConfig::Recovery::kLive ? "live" : "restart"; }

std::string RestartAsk(const JobConfig& cfg, int restart, int64_t next) {
  if (cfg.recovery == JobConfig::Recovery::kLive) {
    return absl::StrCat("restart ", restart, " of ", cfg.max_restarts, " (live recovery): the survivors rejoin ",
                        "generation ", next, " with their state, the lost rank's replacement is healed from a peer");
  }
  return absl::StrCat("restart ", restart, " of ", cfg.max_restarts, ": every rank must Join generation ", next);
}

std::chrono::milliseconds EffectiveHeartbeatTimeout(const JobConfig& cfg) {
  if (cfg.heartbeat_timeout.count() > 0) return cfg.heartbeat_timeout;
  return std::max(std::chrono::milliseconds(1),
                  std::min(std::chrono::milliseconds(5000), cfg.report_timeout / 2));
}

std::chrono::milliseconds HeartbeatInterval(const JobConfig& cfg) {
  const auto quarter = EffectiveHeartbeatTimeout(cfg) / 4;
  return std::clamp(quarter, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

JobConfig ResolveJobConfig(JobConfig c) {
  c.heartbeat_timeout = EffectiveHeartbeatTimeout(c);
  c.plan_lookahead = std::clamp(c.plan_lookahead, 1, kMaxPlanLookahead);
  c.max_restarts = std::clamp(c.max_restarts, 0, kMaxRestarts);
  c.min_world_size = c.min_world_size <= 0 ? c.world_size : std::clamp(c.min_world_size, 1, c.world_size);
  if (c.epoch <= 0) {
    // Why the clock: a coordinator that starts again knows nothing of its
    // predecessor, yet must outrank it; its start time does, on any clock
    // that does not run backwards between the two starts.
    c.epoch = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  }
  return c;
}

absl::Status CheckJoinRequest(const v1::JoinRequest& req, const JobConfig& cfg) {
  if (absl::Status valid = ValidateJoinRequest(req); !valid.ok()) return valid;
  if (req.job_id() != cfg.job_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job id '", req.job_id(), "' does not match this coordinator's job '", cfg.job_id, "': check --job-id"));
  }
  if (req.world_size() != 0 && req.world_size() != cfg.world_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker expects world size ", req.world_size(), " but the coordinator's job '", cfg.job_id,
                     "' has world size ", cfg.world_size));
  }
  return absl::OkStatus();
}

}  // namespace psync::server
