// Each rank's share of an evaluation pass over examples [0, n) of a
// dataset, in batches for Dataset::Examples:
//
//   rank r takes the contiguous range [r*n/W, (r+1)*n/W) (shares differ by
//   at most one example), cut into batches of `batch_size` examples, the
//   last one shorter when the share is not a multiple of it.
//
// Ranks may get different numbers of batches (and a rank gets none when
// n < W): evaluate every batch locally, summing the per-example loss (and
// correct predictions) and the example count, then reduce those sums once
// over all ranks; mean = total loss / total count equals one process's
// mean over all n examples up to float round-off.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace psync::data {

struct ExampleRange {
  int64_t begin = 0, count = 0;
};

// n >= 0 (pass min(num_examples, a limit) to evaluate a prefix), 0 <= rank < W, batch_size >= 1.
absl::StatusOr<std::vector<ExampleRange>> EvalBatches(int64_t num_examples, int rank, int world_size,
                                                      int64_t batch_size);

}  // namespace psync::data
