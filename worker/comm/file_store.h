// FileStore: a Store over a directory shared by the ranks (same host, or a
// shared filesystem). One file per key; Set writes a temporary file and
// renames it over the key's file, so readers never see a partial value.
// Get/Wait poll (1 ms growing to 20 ms). The directory is created if
// missing. Overwriting a key is allowed; stale keys from an earlier run in
// the same directory ARE visible, so use a fresh directory or a PrefixStore
// with a unique id per run.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "worker/comm/store.h"

namespace psync::comm {

class FileStore : public Store {
 public:
  // Creates `dir` (and parents) when missing. Check status() afterwards, or
  // use Open().
  explicit FileStore(std::string dir);
  static absl::StatusOr<std::shared_ptr<FileStore>> Open(const std::string& dir);

  absl::Status status() const { return init_status_; }
  const std::string& dir() const { return dir_; }

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  // The file that holds `key` (keys are percent-encoded into one file name).
  std::string PathFor(const std::string& key) const;

 private:
  // Non-blocking read: NotFound when the key is absent.
  absl::StatusOr<std::string> TryRead(const std::string& key) const;

  // Immutable after construction; all methods are safe from any thread and
  // any process (the filesystem is the only shared state).
  const std::string dir_;
  absl::Status init_status_;
  std::atomic<uint64_t> tmp_counter_{0};
};

}  // namespace psync::comm
