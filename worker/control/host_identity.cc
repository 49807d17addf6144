#include "worker/control/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace psync::control {
namespace {

bool Printable(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u >= 0x21 && u <= 0x7e;
}

// Keeps printable characters only (a hostname or boot id never has others,
// but the coordinator refuses any).
std::string Clean(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (Printable(c)) out.push_back(c);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> MakeHostId(const char* env, const std::string& hostname, const std::string& boot_id,
                                       const std::string& mnt_ns) {
  if (env != nullptr) {
    const std::string id = env;
    if (id.empty() || id.size() > kMaxHostIdBytes) {
      return absl::InvalidArgumentError(absl::StrCat("PSYNC_HOST_ID is ", id.size(), " bytes; expected 1..",
                                                     kMaxHostIdBytes));
    }
    for (size_t i = 0; i < id.size(); ++i) {
      if (!Printable(id[i])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "PSYNC_HOST_ID has byte 0x%02x at offset %d; use printable ASCII without spaces",
            static_cast<unsigned char>(id[i]), i));
      }
    }
    return id;
  }
  std::string id = Clean(hostname);
  if (id.empty()) id = "unknown-host";
  const std::string boot = Clean(boot_id), ns = Clean(mnt_ns);
  if (!boot.empty()) absl::StrAppend(&id, "/", boot);
  if (!ns.empty()) absl::StrAppend(&id, "/mnt:", ns);
  if (id.size() > kMaxHostIdBytes) id = id.substr(id.size() - kMaxHostIdBytes);  // keep the distinguishing tail
  return id;
}

absl::StatusOr<std::string> LocalHostId() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string boot_id;
  {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, boot_id);
  }
  std::string mnt_ns;
  struct stat st {};
  if (::stat("/proc/self/ns/mnt", &st) == 0) mnt_ns = std::to_string(static_cast<unsigned long long>(st.st_ino));
  return MakeHostId(std::getenv("PSYNC_HOST_ID"), host, boot_id, mnt_ns);
}

}  // namespace psync::control
