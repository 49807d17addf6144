// Atomic file writes: readers see either the old file or the complete new
// one, never a torn write, and the new file survives a crash once Commit
// returns. The data goes to a temporary file in the same directory (so the
// rename cannot cross filesystems), which is fsync'ed, renamed over the
// target, and then the directory is fsync'ed to persist the rename.
//
//   AtomicFileWriter w;
//   PSYNC_RETURN_IF_ERROR(w.Open(path));
//   PSYNC_RETURN_IF_ERROR(w.Append(bytes));   // as often as needed
//   PSYNC_RETURN_IF_ERROR(w.Commit());        // without Commit, nothing changes
//
// Errors are absl::Status naming the file and errno's text. Not thread-safe
// (one writer object per file write).
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace psync {

class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  // Removes the temporary file unless Commit succeeded.
  ~AtomicFileWriter();

  // Creates the temporary file next to `path` with permissions exactly `mode`.
  absl::Status Open(const std::string& path, int mode = 0644);
  absl::Status Append(absl::string_view bytes);
  // fsync, rename over the target, fsync the directory. `before_rename`
  // (when given) is asked right before the rename, once the data is on
  // disk: an error from it cancels the write (the temporary file is
  // removed, the target is untouched) and is returned. A caller whose file
  // may become unwanted while it is written (a checkpoint of an aborted
  // generation) checks that there, as late as possible.
  absl::Status Commit(const std::function<absl::Status()>& before_rename = {});

  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `contents` to `path` atomically (the steps above).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents, int mode = 0644);

}  // namespace psync
