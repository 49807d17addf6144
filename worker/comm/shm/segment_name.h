// Names of psync's shared-memory segments, and the clean-up of segments left
// behind by processes that died.
//
//   /psync.<pid_ns>.<pid>.<start_time>.<tag>
//
// The creator's identity is in the name, so a later job can decide from the
// name alone whether the creator is gone; <tag> carries the job id,
// generation, group and rank, so concurrent jobs on one host never collide.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "worker/comm/shm/process_identity.h"

namespace psync::comm::shm {

inline constexpr char kSegmentPrefix[] = "psync.";

// `tag` is sanitised to [A-Za-z0-9_-.] and shortened (with a hash of the
// full tag) so the name stays below NAME_MAX.
std::string SegmentName(const ProcessIdentity& creator, const std::string& tag);
// The creator encoded in a name (with or without the leading '/'), or
// nullopt when it is not one of ours.
std::optional<ProcessIdentity> SegmentCreator(const std::string& name);

// Unlinks every psync segment in `dir` whose creator is dead (same pid
// namespace only: elsewhere we cannot tell). Returns the names removed.
// Segments of other users cannot be removed and are skipped.
std::vector<std::string> RemoveStaleSegments(const std::string& dir = "/dev/shm");

}  // namespace psync::comm::shm
