#include "worker/comm/shm/process_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace psync::comm::shm {
namespace {

uint64_t PidNamespaceInode() {
  struct stat st;
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

// State letter and start time of `pid`; false when it has no /proc entry.
bool ReadStat(int64_t pid, char* state, uint64_t* start_time) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%lld/stat", static_cast<long long>(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return false;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ppid ..." where comm may hold spaces and parentheses:
  // the fields start after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ') return false;
  p += 2;
  *state = *p;
  // Field 3 is the state; the start time is field 22, 19 fields later.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (!p) return false;
    ++p;
  }
  *start_time = std::strtoull(p, nullptr, 10);
  return true;
}

}  // namespace

ProcessIdentity SelfIdentity() {
  ProcessIdentity id;
  id.pid = static_cast<int64_t>(::getpid());
  char state = 0;
  ReadStat(id.pid, &state, &id.start_time);
  id.pid_ns = PidNamespaceInode();
  return id;
}

Liveness CheckLiveness(const ProcessIdentity& who) {
  if (who.pid <= 0) return Liveness::kUnknown;
  if (who.pid_ns != PidNamespaceInode()) return Liveness::kUnknown;
  char state = 0;
  uint64_t start = 0;
  if (!ReadStat(who.pid, &state, &start)) return Liveness::kDead;
  // Z: a killed child its parent has not reaped yet; X: being reaped.
  if (state == 'Z' || state == 'X') return Liveness::kDead;
  if (who.start_time != 0 && start != who.start_time) return Liveness::kDead;
  return Liveness::kAlive;
}

}  // namespace psync::comm::shm
