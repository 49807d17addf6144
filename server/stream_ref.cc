#include "server/stream_ref.h"

#include "absl/strings/str_cat.h"

namespace psync::server {

absl::StatusOr<std::vector<int>> HelloRanks(const v1::Hello& hello, int world) {
  if (hello.ranks_size() == 0) {
    if (hello.rank() < 0 || hello.rank() >= world) {
      return absl::InvalidArgumentError(
          absl::StrCat("hello.rank ", hello.rank(), " is out of range for world size ", world));
    }
    return std::vector<int>{hello.rank()};
  }
  if (hello.ranks_size() > world) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello.ranks lists ", hello.ranks_size(), " ranks but the world has ", world));
  }
  std::vector<bool> seen(static_cast<size_t>(world), false);
  for (int rank : hello.ranks()) {
    if (rank < 0 || rank >= world) {
      return absl::InvalidArgumentError(
          absl::StrCat("hello.ranks names rank ", rank, ", out of range for world size ", world));
    }
    if (seen[static_cast<size_t>(rank)]) {
      return absl::InvalidArgumentError(absl::StrCat("hello.ranks names rank ", rank, " twice"));
    }
    seen[static_cast<size_t>(rank)] = true;
  }
  return std::vector<int>(hello.ranks().begin(), hello.ranks().end());
}

absl::Status CheckHostStream(const StreamRef& stream, const char* what) {
  if (stream.host()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " is for host streams only (hello.ranks); this is the Train stream of rank ", stream.own_rank));
}

}  // namespace psync::server
