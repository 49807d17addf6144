#include "common/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace psync {
namespace {

absl::Status Errno(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty() && !committed_) ::unlink(tmp_.c_str());
}

absl::Status AtomicFileWriter::Open(const std::string& path, int mode) {
  if (!tmp_.empty()) return absl::FailedPreconditionError(absl::StrCat("AtomicFileWriter for ", path, " opened twice"));
  if (path.empty() || path.back() == '/') return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a file path"));
  path_ = path;
  std::string tmp = absl::StrCat(path, ".tmp.XXXXXX");
  fd_ = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd_ < 0) {
    return Errno(errno, absl::StrCat("cannot create a temporary file next to ", path,
                                     " (does the directory exist and is it writable?)"));
  }
  tmp_ = tmp;
  // mkstemp creates 0600; outputs should be readable like any other file.
  // (Not umask-adjusted: reading the umask means changing it, which races
  // with other threads.)
  if (::fchmod(fd_, static_cast<mode_t>(mode)) != 0) return Errno(errno, absl::StrCat("chmod ", tmp_));
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Append(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("write to ", path_, " before Open or after Commit"));
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, absl::StrCat("writing ", tmp_));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit(const std::function<absl::Status()>& before_rename) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("commit of ", path_, " before Open or twice"));
  if (::fsync(fd_) != 0) return Errno(errno, absl::StrCat("fsync ", tmp_));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Errno(errno, absl::StrCat("closing ", tmp_));
  // Why not committed_: the destructor then removes the temporary file.
  if (before_rename) {
    if (absl::Status st = before_rename(); !st.ok()) return st;
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return Errno(errno, absl::StrCat("renaming ", tmp_, " to ", path_));
  committed_ = true;
  // Persist the rename itself. The file is complete either way, so a failure
  // here (e.g. a filesystem without directory fsync) is not reported.
  const int dfd = ::open(DirOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents, int mode) {
  AtomicFileWriter w;
  if (absl::Status st = w.Open(path, mode); !st.ok()) return st;
  if (absl::Status st = w.Append(contents); !st.ok()) return st;
  return w.Commit();
}

}  // namespace psync
