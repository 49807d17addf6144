// Constant-time comparison of a bearer token (used by psync-coordinator's
// auth and psync-relay's local server).
#pragma once

#include "absl/strings/string_view.h"

namespace psync {

// True when `given` equals `secret`. The time taken depends only on the
// length of `given` (what the caller sent), never on where the first
// difference is or on the secret's length, so timing reveals neither.
bool TokenEquals(absl::string_view given, absl::string_view secret);

}  // namespace psync
