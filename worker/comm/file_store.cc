#include "worker/comm/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/comm/util.h"

namespace psync::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string Encode(const std::string& key) {
  std::string out;
  for (size_t i = 0; i < key.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                 c == '-' || (c == '.' && i > 0);
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  if (out.empty()) out = "%";  // the empty key
  return out;
}

absl::Status ErrnoStatus(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(absl::StrCat("FileStore: write ", path));
    }
    off += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void Backoff(std::chrono::milliseconds* delay, Clock::time_point deadline) {
  auto left = deadline - Clock::now();
  auto d = std::min<Clock::duration>(*delay, left);
  if (d.count() > 0) std::this_thread::sleep_for(d);
  *delay = std::min(*delay * 2, std::chrono::milliseconds(20));
}

}  // namespace

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_)) {
    init_status_ = absl::FailedPreconditionError(
        absl::StrCat("FileStore: cannot create directory '", dir_, "': ", ec ? ec.message() : "not a directory"));
  }
}

absl::StatusOr<std::shared_ptr<FileStore>> FileStore::Open(const std::string& dir) {
  auto store = std::make_shared<FileStore>(dir);
  if (!store->status().ok()) return store->status();
  return store;
}

std::string FileStore::PathFor(const std::string& key) const { return dir_ + "/" + Encode(key); }

absl::Status FileStore::Set(const std::string& key, const std::string& value) {
  if (!init_status_.ok()) return init_status_;
  const std::string path = PathFor(key);
  const std::string tmp = absl::StrCat(dir_, "/.tmp.", ::getpid(), ".", tmp_counter_.fetch_add(1), ".",
                                       std::hash<std::thread::id>()(std::this_thread::get_id()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("FileStore: create ", tmp));
  absl::Status st = WriteAll(fd, value, tmp);
  if (::close(fd) != 0 && st.ok()) st = ErrnoStatus(absl::StrCat("FileStore: close ", tmp));
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = ErrnoStatus(absl::StrCat("FileStore: rename to ", path, " (key '", key, "')"));
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

absl::StatusOr<std::string> FileStore::TryRead(const std::string& key) const {
  const std::string path = PathFor(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(key);
    return ErrnoStatus(absl::StrCat("FileStore: open ", path, " (key '", key, "')"));
  }
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status st = ErrnoStatus(absl::StrCat("FileStore: read ", path));
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::StatusOr<std::string> FileStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  if (!init_status_.ok()) return init_status_;
  const auto deadline = Clock::now() + timeout;
  std::chrono::milliseconds delay(1);
  while (true) {
    absl::StatusOr<std::string> v = TryRead(key);
    if (v.ok() || v.status().code() != absl::StatusCode::kNotFound) return v;
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("FileStore(", dir_, "): timed out after ",
                                                      internal::FormatDuration(timeout),
                                                      " waiting for key '", key, "'"));
    }
    Backoff(&delay, deadline);
  }
}

absl::Status FileStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (!init_status_.ok()) return init_status_;
  const auto deadline = Clock::now() + timeout;
  std::chrono::milliseconds delay(1);
  while (true) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      struct stat sb;
      if (::stat(PathFor(k).c_str(), &sb) != 0) missing.push_back(k);
    }
    if (missing.empty()) return absl::OkStatus();
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("FileStore(", dir_, "): timed out after ",
                                                      internal::FormatDuration(timeout),
                                                      " waiting for key(s): ", internal::QuoteJoin(missing)));
    }
    Backoff(&delay, deadline);
  }
}

}  // namespace psync::comm
