// Which psync build wrote a file: "git <describe>" of the source tree when
// CMake was configured (`git describe --always --dirty`), or "unknown"
// outside a git checkout. Informational (checkpoint manifests).
#pragma once

namespace psync::checkpoint {

const char* PsyncBuildVersion();

}  // namespace psync::checkpoint
