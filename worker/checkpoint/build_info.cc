#include "worker/checkpoint/build_info.h"

// PSYNC_GIT_DESCRIBE is set on this file only (worker/checkpoint/CMakeLists.txt),
// so a new commit recompiles one file.
#ifndef PSYNC_GIT_DESCRIBE
#define PSYNC_GIT_DESCRIBE "unknown"
#endif

namespace psync::checkpoint {

const char* PsyncBuildVersion() { return PSYNC_GIT_DESCRIBE; }

}  // namespace psync::checkpoint
