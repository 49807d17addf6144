#include "worker/data/batch_geometry.h"

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

}  // namespace psync::data
