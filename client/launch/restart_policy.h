// What psync-launch does when a worker of a generation fails
// (--max-restarts, like torchrun's): which rank to name, whether to restart
// every worker, and the worker flags of the next generation. Pure functions
// of exit codes and flags, so every rule is unit-testable without processes.
//
// Exit codes (docs/cli-contract.md): 0 done, 1 internal, 2 bad flags or
// input, 3 rendezvous failed, 4 a peer was lost / the job aborted, 5 the
// coordinator was lost, 128+N killed by signal N.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace psync::launch {

// How one worker of a generation ended.
struct WorkerEnd {
  int rank = -1;
  int exit_code = 0;       // 0.., or 128+signal
  int64_t reaped_at = 0;   // the supervision round it was seen in (earlier = smaller)
};

// 4 (peer lost / job aborted) and 5 (coordinator lost) follow from another
// failure; they are not what started it.
bool IsConsequence(int exit_code);

// The failure that ended the generation: the earliest one seen; among those
// seen in the same round, one that is not a consequence, then the lowest
// rank. nullopt when every worker exited 0.
std::optional<WorkerEnd> FirstFailure(const std::vector<WorkerEnd>& ends);

enum class RestartDecision {
  kRestart,         // stop the others, start every worker again
  kNoRestartsLeft,  // max_restarts used (or 0): the job fails as without restarts
  kNotRetriable,    // exit 2 (bad flags or input), 126/127 (the program cannot run): it would fail the same way
  kStopping,        // the user asked to stop, or the coordinator is gone
};
RestartDecision Decide(const WorkerEnd& failure, int restarts_done, int max_restarts, bool stopping);

// The worker flags of generation `restart` (0 = the first start): the user's
// flags, and from the first restart on `--resume` (resume from the newest
// checkpoint) when they name a --checkpoint-dir and do not pass --resume
// already. `*added_resume` (optional) tells whether it was added.
std::vector<std::string> WorkerFlagsFor(const std::vector<std::string>& user_flags, int restart,
                                        bool* added_resume = nullptr);

}  // namespace psync::launch
