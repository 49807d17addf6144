// psync-worker's exit codes (docs/cli-contract.md), and how an error carries
// its code across module boundaries: a Status made by WithExitCode keeps the
// code as a payload, so the worker's main path can return any builder's
// error as is and still exit with the right number.
#pragma once

#include "absl/status/status.h"

namespace psync::runtime {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,
  kExitBadInput = 2,
  kExitRendezvous = 3,
  kExitPeerLost = 4,
  kExitCoordinatorLost = 5,
};

// `status` (not OK) tagged with `code`.
absl::Status WithExitCode(absl::Status status, int code);
// The code WithExitCode attached, else `fallback`.
int ExitCodeOf(const absl::Status& status, int fallback);

}  // namespace psync::runtime
