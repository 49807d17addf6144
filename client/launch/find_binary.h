// Where psync-launch finds the binaries it starts (psync-coordinator,
// psync-worker, psync-relay, psyncctl).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync::launch {

// `flag_value` when the user gave one (it must be an executable file);
// else `name` next to this binary, then in the build tree (this binary lives
// in <build>/client/launch/; each of `build_rel` is a folder under <build>),
// then on PATH. The error names `--<flag>`, which overrides the search.
absl::StatusOr<std::string> FindBinary(const std::string& flag_value, const std::string& name,
                                       const std::vector<std::string>& build_rel, const std::string& flag);

}  // namespace psync::launch
