#include "worker/comm/shm/segment_name.h"

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace psync::comm::shm {
namespace {

constexpr size_t kMaxTag = 160;

std::string Sanitize(const std::string& tag) {
  std::string out;
  for (char c : tag) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    out.push_back(ok ? c : '_');
  }
  if (out.size() > kMaxTag) {
    out = absl::StrCat(out.substr(0, kMaxTag - 17), "~", absl::Hex(std::hash<std::string>()(tag), absl::kZeroPad16));
  }
  return out;
}

}  // namespace

std::string SegmentName(const ProcessIdentity& creator, const std::string& tag) {
  return absl::StrCat("/", kSegmentPrefix, creator.pid_ns, ".", creator.pid, ".", creator.start_time, ".",
                      Sanitize(tag));
}

std::optional<ProcessIdentity> SegmentCreator(const std::string& name) {
  std::string n = name;
  if (!n.empty() && n[0] == '/') n = n.substr(1);
  if (n.rfind(kSegmentPrefix, 0) != 0) return std::nullopt;
  std::vector<std::string> parts = absl::StrSplit(n.substr(sizeof(kSegmentPrefix) - 1), absl::MaxSplits('.', 3));
  if (parts.size() < 4) return std::nullopt;
  ProcessIdentity id;
  if (!absl::SimpleAtoi(parts[0], &id.pid_ns) || !absl::SimpleAtoi(parts[1], &id.pid) ||
      !absl::SimpleAtoi(parts[2], &id.start_time) || id.pid <= 0) {
    return std::nullopt;
  }
  return id;
}

std::vector<std::string> RemoveStaleSegments(const std::string& dir) {
  std::vector<std::string> removed;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return removed;
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const std::string& n : names) {
    std::optional<ProcessIdentity> creator = SegmentCreator(n);
    if (!creator || CheckLiveness(*creator) != Liveness::kDead) continue;
    // shm_unlink only works for the default /dev/shm; other dirs (tests)
    // are plain directories.
    const int rc = dir == "/dev/shm" ? ::shm_unlink(("/" + n).c_str()) : ::unlink((dir + "/" + n).c_str());
    if (rc == 0) removed.push_back(n);
  }
  return removed;
}

}  // namespace psync::comm::shm
