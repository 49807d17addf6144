// Moved to common/exit_code.h, so ddp and comm can tag their errors too;
// the runtime's includes move with the restructuring of worker/runtime.
#pragma once

#include "common/exit_code.h"

namespace psync::runtime {
using psync::ExitCode;
using psync::ExitCodeOf;
using psync::kExitBadInput;
using psync::kExitCoordinatorLost;
using psync::kExitInternal;
using psync::kExitOk;
using psync::kExitPeerLost;
using psync::kExitRendezvous;
using psync::WithExitCode;
}  // namespace psync::runtime
