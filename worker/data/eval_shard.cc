#include "worker/data/eval_shard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace psync::data {

absl::StatusOr<std::vector<ExampleRange>> EvalBatches(int64_t n, int rank, int world, int64_t batch_size) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("evaluation examples: ", n, ", expected >= 0"));
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("evaluation: rank ", rank, " of world ", world, ", expected 0 <= rank < world"));
  }
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("evaluation batch size is ", batch_size, ", expected >= 1"));
  }
  const int64_t begin = n * rank / world;
  const int64_t end = n * (rank + 1) / world;
  std::vector<ExampleRange> out;
  for (int64_t b = begin; b < end; b += batch_size) out.push_back({b, std::min(batch_size, end - b)});
  return out;
}

}  // namespace psync::data
