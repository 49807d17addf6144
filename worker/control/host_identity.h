// Host identity: which shared-memory domain this worker runs in, sent to the
// coordinator in Join (JoinRequest.host_id) so every rank learns which ranks
// can share memory with it (JoinResult::host_ids).
//
// PSYNC_HOST_ID from the environment when set (any printable ASCII without
// spaces, at most 256 bytes); else "<hostname>/<boot id>/mnt:<inode of the
// mount namespace>". The boot id tells two boots of one machine apart; the
// mount namespace tells two containers on one machine apart, whose /dev/shm
// differ (each has its own mount of it).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace psync::control {

inline constexpr size_t kMaxHostIdBytes = 256;  // as the coordinator enforces

// The id from its parts (`env` = PSYNC_HOST_ID or null; `boot_id` and
// `mnt_ns` may be empty when unknown). InvalidArgument names PSYNC_HOST_ID.
absl::StatusOr<std::string> MakeHostId(const char* env, const std::string& hostname, const std::string& boot_id,
                                       const std::string& mnt_ns);

// This process's host id (reads the environment, gethostname,
// /proc/sys/kernel/random/boot_id and /proc/self/ns/mnt).
absl::StatusOr<std::string> LocalHostId();

}  // namespace psync::control
