#include "client/launch/find_binary.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace psync::launch {
namespace {

std::string SelfDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

bool IsExecutable(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

}  // namespace

absl::StatusOr<std::string> FindBinary(const std::string& flag_value, const std::string& name,
                                       const std::vector<std::string>& build_rel, const std::string& flag) {
  if (!flag_value.empty()) {
    if (IsExecutable(flag_value)) return flag_value;
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", flag_value, " is not an executable"));
  }
  const std::string dir = SelfDir();
  std::vector<std::string> candidates = {dir + "/" + name};
  for (const std::string& rel : build_rel) candidates.push_back(dir + "/../../" + rel + "/" + name);
  for (const std::string& c : candidates) {
    if (IsExecutable(c)) return c;
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string d;
    while (std::getline(ss, d, ':')) {
      if (!d.empty() && IsExecutable(d + "/" + name)) return d + "/" + name;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("cannot find ", name, " next to psync-launch or on PATH (use --", flag, ")"));
}

}  // namespace psync::launch
