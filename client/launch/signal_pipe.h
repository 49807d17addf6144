// SIGINT, SIGTERM and SIGHUP for psync-launch's one thread: the handler
// only writes the signal's number as a byte to a non-blocking self-pipe,
// which the supervision loop reads between rounds (and polls while it
// sleeps), so nothing but a write(2) ever runs in the handler. SIGPIPE is
// ignored. One pipe per process (the handler has no other way to find it).
#pragma once

#include <chrono>
#include <optional>

#include "absl/status/status.h"

namespace psync::launch {

// Makes the pipe and installs the handlers; Internal naming the failed call.
absl::Status InstallSignalPipe();
// The next signal that came, if one did; never blocks.
std::optional<int> TakeSignal();
// Sleeps until a signal is pending or `limit` passed.
void WaitForSignal(std::chrono::milliseconds limit);

}  // namespace psync::launch
