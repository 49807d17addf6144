#include "worker/comm/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/comm/util.h"

namespace psync::comm::shm {
namespace {

std::string Errno(int err) { return std::strerror(err); }

}  // namespace

absl::StatusOr<ShmSegment> ShmSegment::Create(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, S_IRUSR | S_IWUSR);
  if (fd < 0) {
    const int err = errno;
    return absl::Status(err == EEXIST ? absl::StatusCode::kAlreadyExists : absl::StatusCode::kUnavailable,
                        absl::StrCat("creating shared memory /dev/shm", name, ": ", Errno(err)));
  }
  ShmSegment seg;
  seg.name_ = name;
  seg.owner_ = true;
  // Why posix_fallocate and not only ftruncate: tmpfs backs pages lazily, so
  // a full /dev/shm would kill us with SIGBUS at the first write.
  int err = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (err == 0) err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    seg.unlinked_ = true;
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve ", internal::FormatBytes(bytes), " of shared memory for /dev/shm", name, ": ", Errno(err),
        " (is /dev/shm too small? docker: --shm-size; kubernetes: an emptyDir with medium Memory)"));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    seg.unlinked_ = true;
    return absl::ResourceExhaustedError(absl::StrCat("mapping /dev/shm", name, ": ", Errno(err)));
  }
  seg.data_ = p;
  seg.size_ = bytes;
  return seg;
}

absl::StatusOr<ShmSegment> ShmSegment::Open(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    return absl::Status(err == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kUnavailable,
                        absl::StrCat("opening shared memory /dev/shm", name, ": ", Errno(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("shared memory /dev/shm", name, " has ",
                                                      static_cast<long long>(st.st_size), " bytes, expected ", bytes));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return absl::UnavailableError(absl::StrCat("mapping /dev/shm", name, ": ", Errno(err)));
  ShmSegment seg;
  seg.name_ = name;
  seg.data_ = p;
  seg.size_ = bytes;
  return seg;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::move(other.name_);
    data_ = other.data_;
    size_ = other.size_;
    owner_ = other.owner_;
    unlinked_ = other.unlinked_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.owner_ = false;
    other.unlinked_ = true;
  }
  return *this;
}

void ShmSegment::Unlink() {
  if (owner_ && !unlinked_) ::shm_unlink(name_.c_str());
  unlinked_ = true;
}

void ShmSegment::Reset() {
  if (data_) ::munmap(data_, size_);
  Unlink();
  data_ = nullptr;
  size_ = 0;
  owner_ = false;
}

}  // namespace psync::comm::shm
