// Bearer tokens (psync-coordinator's auth and psync-relay's local server):
// the `authorization: Bearer <token>` header and a constant-time comparison.
#pragma once

#include "absl/strings/string_view.h"

namespace psync {

// True when `given` equals `secret`. The time taken depends only on the
// length of `given` (what the caller sent), never on where the first
// difference is or on the secret's length, so timing reveals neither.
bool TokenEquals(absl::string_view given, absl::string_view secret);

// True when `header` (an `authorization` metadata value) is "Bearer <t>"
// with TokenEquals(t, secret).
bool BearerTokenMatches(absl::string_view header, absl::string_view secret);

}  // namespace psync
