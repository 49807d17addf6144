// ProcessIdentity: who created a shared-memory segment, precisely enough to
// tell later whether that process is still alive (pid + start time guard
// against pid reuse; the pid namespace says whether our /proc can see it).
#pragma once

#include <cstdint>

namespace psync::comm::shm {

struct ProcessIdentity {
  int64_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot)
  uint64_t pid_ns = 0;      // inode of /proc/self/ns/pid
};

// The calling process (read fresh: a forked child has a new identity).
ProcessIdentity SelfIdentity();

enum class Liveness {
  kAlive,
  kDead,     // gone, a zombie, or the pid now belongs to another process
  kUnknown,  // another pid namespace: our /proc cannot tell
};

// Reads /proc/<pid>/stat (about 10 us).
Liveness CheckLiveness(const ProcessIdentity& who);

}  // namespace psync::comm::shm
