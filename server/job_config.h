// JobConfig: one job's settings (psync-coordinator's flags), with the
// heartbeat rules derived from them. No gRPC.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "psync/v1/coordinator.pb.h"

namespace psync::server {

struct JobConfig {
  std::string job_id = "psync";
  int world_size = 1;
  std::chrono::milliseconds join_timeout{300000};
  std::chrono::milliseconds report_timeout{60000};
  // A TRAINING rank not heard from (any Train message) this long is lost.
  // 0 = min(5 s, report_timeout / 2).
  std::chrono::milliseconds heartbeat_timeout{0};
  // K, the plan lookahead announced in JoinResponse (coordinator.proto).
  int plan_lookahead = 2;
  // Test and benchmark only: hold every plan back this long before it goes
  // to the ranks (simulates a slow coordinator). 0 = off.
  std::chrono::milliseconds test_only_plan_delay{0};
  // Restartable mode: how many times a lost rank may end a generation and let
  // the world rejoin as the next one (job_state.h, "Generations"). 0 = a lost
  // rank aborts the job (the default).
  int max_restarts = 0;
  // What a restart asks of the survivors (coordinator.proto, "Live
  // recovery"): kLive = they keep their state and Join the next generation
  // in-process (a replacement heals from them); kRestart = they exit and the
  // whole world resumes from a checkpoint.
  enum class Recovery { kLive, kRestart };
  Recovery recovery = Recovery::kLive;
  // Elastic world size (coordinator.proto, "Elastic world size"): a
  // generation may start with fewer ranks, down to this many, once
  // rejoin_timeout has passed since it opened. 0 = world_size (not elastic).
  int min_world_size = 0;
  std::chrono::milliseconds rejoin_timeout{30000};
  // Coordinator failover (coordinator.proto): this coordinator's epoch,
  // carried by every plan; each start must take a higher one than any the
  // workers obeyed. 0 = the start time in ms since 1970 (ResolveJobConfig).
  int64_t epoch = 0;

  bool Elastic() const { return min_world_size > 0 && min_world_size < world_size; }
};

// "live" / "restart" (--recovery), and back; nullopt for another word.
std::optional<JobConfig::Recovery> ParseRecovery(std::string_view word);
const char* RecoveryName(JobConfig::Recovery r);

// What a restart's ABORT asks of the ranks (after "generation g aborted:
// WHY; "): restart k of N, and who Joins generation `next` how.
std::string RestartAsk(const JobConfig& cfg, int restart, int64_t next);

// heartbeat_timeout with the default applied (always > 0).
std::chrono::milliseconds EffectiveHeartbeatTimeout(const JobConfig& cfg);
// The interval workers send heartbeats at: heartbeat_timeout / 4, in 10 ms .. 1 s.
std::chrono::milliseconds HeartbeatInterval(const JobConfig& cfg);
// `c` with heartbeat_timeout resolved, the lookahead in 1..kMaxPlanLookahead
// and max_restarts in 0..kMaxRestarts (limits.h); min_world_size in
// 1..world_size (0 becomes world_size).
JobConfig ResolveJobConfig(JobConfig c);

// Whether `req` is a well-formed Join for this job: within the limits
// (ValidateJoinRequest), then the job id and world size (FailedPrecondition
// naming both values).
absl::Status CheckJoinRequest(const v1::JoinRequest& req, const JobConfig& cfg);

}  // namespace psync::server
