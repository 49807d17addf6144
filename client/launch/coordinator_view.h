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
  int world_size = 0;      // the current generation's
  int max_world_size = 0;  // the job's (0: a coordinator that does not say; then world_size)
  int min_world_size = 0;  // elastic jobs: the smallest world a generation may start with
  std::string world_change_reason;  // why the current world has its size (control.proto)
  std::string reason;               // why ABORTED / STOPPING / WAITING
  std::string last_restart_reason;  // why the previous generation was aborted
  std::string instance_id;          // the coordinator process ("": one that does not say)

  bool Over() const { return state == "JOB_FINISHED" || state == "JOB_ABORTED"; }
  int MaxWorld() const { return max_world_size > 0 ? max_world_size : world_size; }
  // An elastic job runs a generation without some of its ranks (a node that
  // comes now must ask for a regroup to get in).
  bool RunsShrunk() const { return state == "JOB_RUNNING" && world_size < MaxWorld(); }
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

// `generation_seen`: the coordinator's generation when this node's current
// workers started; `instance_seen`: its instance_id then ("": unknown).
// `local_failure`: one of this node's workers failed.
//   another instance_id, local_failure -> kNoRestart (the coordinator was replaced: the new one's
//                                         job and generations are not the ones these workers ran;
//                                         kGoOn while it is WAITING for generation 1: it may still
//                                         rebuild the job from the workers that ride through;
//                                         without a local failure the rules below: its workers
//                                         re-register with it or fail, coordinator failover)
//   generation > generation_seen       -> kRestart (a loss anywhere, or an elastic regroup, opened
//                                         the next generation)
//   FINISHED / ABORTED                 -> kNoRestart
//   local_failure and still WAITING    -> kNoRestart (a rank lost before the world is complete
//                                         ends no generation: its Join is just withdrawn)
//   otherwise                          -> kGoOn (RUNNING / STOPPING: a loss is noticed within the
//                                         coordinator's heartbeat timeout, then one of the above)
Judgement Judge(const CoordinatorView& v, int64_t generation_seen, bool local_failure,
                const std::string& instance_seen = "");

}  // namespace psync::launch
