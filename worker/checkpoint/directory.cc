#include "worker/checkpoint/directory.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/checkpoint/format.h"

namespace psync::checkpoint {

absl::StatusOr<CheckpointDirListing> ListCheckpointDir(const std::string& dir) {
  namespace fs = std::filesystem;
  CheckpointDirListing out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return out;
  auto fail = [&](const std::error_code& e) {
    const std::string msg = absl::StrCat("cannot list checkpoint directory ", dir, ": ", e.message());
    return e == std::errc::permission_denied ? absl::PermissionDeniedError(msg) : absl::FailedPreconditionError(msg);
  };
  if (ec) return fail(ec);
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (auto step = ParseCheckpointFileName(name)) {
      out.checkpoints.push_back({*step, PathInDir(dir, name)});
    } else if (auto tmp_step = ParseTempFileName(name)) {
      out.temp_files.push_back({*tmp_step, PathInDir(dir, name)});
    }
  }
  if (ec) return fail(ec);
  auto newest_first = [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.step != b.step ? a.step > b.step : a.path < b.path;
  };
  std::sort(out.checkpoints.begin(), out.checkpoints.end(), newest_first);
  std::sort(out.temp_files.begin(), out.temp_files.end(), newest_first);
  return out;
}

}  // namespace psync::checkpoint
