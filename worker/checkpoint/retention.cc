#include "worker/checkpoint/retention.h"

#include <errno.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/checkpoint/directory.h"

namespace psync::checkpoint {

RetentionResult ApplyRetention(const std::string& dir, int keep, int64_t written_step) {
  RetentionResult result;
  auto listing = ListCheckpointDir(dir);
  if (!listing.ok()) {
    result.errors.push_back(std::string(listing.status().message()));
    return result;
  }
  auto remove = [&](const std::string& path) {
    if (::unlink(path.c_str()) == 0 || errno == ENOENT) {
      result.removed.push_back(path);
    } else {
      result.errors.push_back(absl::StrCat("cannot delete ", path, ": ", std::strerror(errno)));
    }
  };
  int kept = 0;
  for (const CheckpointFile& f : listing->checkpoints) {  // newest first
    const bool newest = keep == 0 || kept < keep;
    if (newest || f.step == written_step) {
      ++kept;
      continue;
    }
    remove(f.path);
  }
  for (const CheckpointFile& tmp : listing->temp_files) {
    if (tmp.step <= written_step) remove(tmp.path);
  }
  return result;
}

}  // namespace psync::checkpoint
