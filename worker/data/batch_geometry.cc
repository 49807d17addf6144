#include "worker/data/batch_geometry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace psync::data {

absl::Status ValidateBatchSpec(const BatchSpec& s) {
  auto bad = [](const std::string& msg) { return absl::InvalidArgumentError(absl::StrCat("batch: ", msg)); };
  if (s.world_size < 1) return bad(absl::StrCat("world size is ", s.world_size, ", expected >= 1"));
  if (s.rank < 0 || s.rank >= s.world_size) {
    return bad(absl::StrCat("rank is ", s.rank, ", expected 0..", s.world_size - 1));
  }
  if (s.accumulate < 1) return bad(absl::StrCat("accumulate (M) is ", s.accumulate, ", expected >= 1"));
  if (s.micro < 0 || s.micro >= s.accumulate) {
    return bad(absl::StrCat("micro-batch index is ", s.micro, ", expected 0..", s.accumulate - 1));
  }
  if (s.step < 0) return bad(absl::StrCat("step is ", s.step, ", expected >= 0"));
  if (s.global_batch < 1) return bad(absl::StrCat("global batch (B) is ", s.global_batch, ", expected >= 1"));
  const int64_t parts = static_cast<int64_t>(s.world_size) * s.accumulate;
  if (s.global_batch % parts != 0) {
    return bad(absl::StrCat("global batch (B) is ", s.global_batch,
                            ", expected a multiple of world size x accumulate = ", s.world_size, " x ", s.accumulate,
                            " = ", parts));
  }
  return absl::OkStatus();
}

int64_t MicroBatchSize(const BatchSpec& s) {
  return s.global_batch / (static_cast<int64_t>(s.world_size) * s.accumulate);
}

int64_t FirstSlot(const BatchSpec& s) {
  return static_cast<int64_t>(s.rank) * (s.global_batch / s.world_size) + s.micro * MicroBatchSize(s);
}

absl::StatusOr<int64_t> AccumulateForWorld(int64_t global_batch, int64_t accumulate, int planned_world, int world) {
  if (world < 1 || accumulate < 1 || global_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch: world ", world, ", accumulate ", accumulate,
                                                   ", global batch ", global_batch, ": each must be >= 1"));
  }
  const int64_t planned = planned_world > 0 ? planned_world : world;
  const int64_t planned_micro = global_batch / (planned * accumulate);
  for (int64_t m = accumulate; m <= global_batch / world; ++m) {
    const int64_t parts = static_cast<int64_t>(world) * m;
    if (global_batch % parts == 0 && global_batch / parts <= std::max<int64_t>(planned_micro, 1)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--global-batch ", global_batch, " cannot be split over ", world, " ranks with --accumulate ", accumulate,
      " or more micro-batches (planned: ", planned, " ranks); choose a global batch divisible by every world size "
      "the job may run at"));
}

}  // namespace psync::data
