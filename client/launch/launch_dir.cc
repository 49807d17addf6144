#include "client/launch/launch_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace psync::launch {
namespace {

// 32 random bytes from the kernel, as hex; empty if /dev/urandom fails.
std::string RandomToken() {
  unsigned char buf[32];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  size_t got = 0;
  while (got < sizeof(buf)) {
    ssize_t n = read(fd, buf + got, sizeof(buf) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got != sizeof(buf)) return "";
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : buf) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace

absl::Status LaunchDir::Create() {
  char tmpl[] = "/tmp/psync-launch-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  path_ = tmpl;
  return absl::OkStatus();
}

absl::StatusOr<std::string> LaunchDir::MakeToken() {
  const std::string token = RandomToken();
  const std::string file = token_file();
  int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  const bool wrote =
      !token.empty() && fd >= 0 && write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  const int err = errno;
  if (fd >= 0) close(fd);
  if (!wrote) {
    return absl::InternalError(absl::StrCat("cannot make a token for the job (/dev/urandom or ", file,
                                            "): ", std::strerror(err), "; pass --token or set PSYNC_TOKEN"));
  }
  return token;
}

void LaunchDir::Remove() {
  if (path_.empty()) return;
  for (const std::string& f : {port_file(), relay_port_file(), token_file(), status_file(), status_err_file()}) {
    unlink(f.c_str());
  }
  // The journal's files (journal-<epoch>.pb and a temporary one a killed
  // coordinator may have left): whatever is in the folder the launcher made.
  if (DIR* d = opendir(state_dir().c_str())) {
    while (const dirent* e = readdir(d)) {
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") {
        unlink((state_dir() + "/" + e->d_name).c_str());
      }
    }
    closedir(d);
    rmdir(state_dir().c_str());
  }
  rmdir(path_.c_str());
  path_.clear();
}

}  // namespace psync::launch
