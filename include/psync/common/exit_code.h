// psync-worker's exit codes (docs/cli-contract.md), and how an error carries
// its code across module boundaries: a Status made by WithExitCode keeps the
// code as a payload (and Annotate keeps payloads), so the module that knows
// the cause tags the error once -- the coordinator client (lost: 5; aborted:
// 4), the job session (rendezvous: 3), the DDP step check (a rank out of
// step: 4) -- and psync-worker exits with the code the error carries
// (worker/runtime/worker_exit.h decides what an untagged error means).
#pragma once

#include <optional>

#include "absl/status/status.h"

namespace psync {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,
  kExitBadInput = 2,
  kExitRendezvous = 3,
  kExitPeerLost = 4,
  kExitCoordinatorLost = 5,
};

// `status` (not OK) tagged with `code` (replacing an earlier tag).
absl::Status WithExitCode(absl::Status status, int code);
// The code WithExitCode attached, if any.
std::optional<int> ExitCodeIn(const absl::Status& status);
// The code WithExitCode attached, else `fallback`.
int ExitCodeOf(const absl::Status& status, int fallback);

}  // namespace psync
