// What one node's launcher needs to know of its job from the coordinator
// (`psyncctl --json status`, control.proto StatusResponse), and what that
// means for the node's current generation of workers. Pure functions, so
// every rule is unit-tested without processes.
//
// Why the coordinator decides: it counts the job's generations
// (--max-restarts on psync-coordinator); a launcher that counted its own
// restarts would disagree with the other nodes' as soon as a failure is
// seen on one node only (client/launch/README.md, "Across nodes").
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync::launch {

struct CoordinatorView {
  std::string job_id;
  std::string state;       // control.proto JobState name: "JOB_WAITING", "JOB_RUNNING", ...
  int64_t generation = 0;  // the current generation (1 + restarts)
  int restarts = 0;        // generations aborted by a lost rank after which the world rejoined
  int max_restarts = 0;
  int world_size = 0;
  std::string reason;               // why ABORTED / STOPPING / WAITING
  std::string last_restart_reason;  // why the previous generation was aborted

  bool Over() const { return state == "JOB_FINISHED" || state == "JOB_ABORTED"; }
};

// The StatusResponse JSON psyncctl prints (proto field names; 64-bit
// integers as strings). InvalidArgument when it is not that.
absl::StatusOr<CoordinatorView> ParseStatusJson(absl::string_view text);

enum class Verdict {
  kGoOn,       // this generation goes on (or the coordinator has not noticed a failure yet)
  kRestart,    // the coordinator opened a new generation: restart this node's ranks
  kNoRestart,  // no generation follows this node's: the job is over, or a rank failed before it ran
};
struct Judgement {
  Verdict verdict = Verdict::kGoOn;
  std::string why;  // for kRestart and kNoRestart: one phrase for the launcher's line
};

// `restarts_seen`: the coordinator's restart count when this node's current
// generation started. `local_failure`: one of this node's workers failed.
//   restarts > restarts_seen           -> kRestart (a loss anywhere opened the next generation)
//   FINISHED / ABORTED                 -> kNoRestart
//   local_failure and still WAITING    -> kNoRestart (a rank lost before the world is complete
//                                         ends no generation: its Join is just withdrawn)
//   otherwise                          -> kGoOn (RUNNING / STOPPING: a loss is noticed within the
//                                         coordinator's heartbeat timeout, then one of the above)
Judgement Judge(const CoordinatorView& v, int restarts_seen, bool local_failure);

}  // namespace psync::launch
