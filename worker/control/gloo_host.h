// The address a worker's Gloo transport binds to.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace psync::control {

// For a coordinator at `coordinator` (HOST:PORT): 127.0.0.1 when the
// coordinator is on loopback, else the local address of a socket connected
// towards it (the interface peers can reach this host on).
absl::StatusOr<std::string> DeriveGlooHost(const std::string& coordinator);

}  // namespace psync::control
