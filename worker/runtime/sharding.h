// Which data rows a rank uses, per the training contract:
//   step s uses the global rows (s*B + k) mod N, k < B;
//   rank r takes the contiguous shard [r*B/W, (r+1)*B/W) of them;
//   micro-batch m of rank r is [m*B/(W*M), (m+1)*B/(W*M)) of its shard.
// B must be divisible by W*M (checked by ValidateBatchGeometry).
// The contract lives in worker/data (batch_geometry.h, example_order.h);
// this is its unshuffled rows case for today's trainer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace psync::runtime {

struct BatchGeometry {
  int64_t global_batch = 0;  // B
  int world_size = 1;        // W
  int64_t accumulate = 1;    // M
  int64_t dataset_rows = 0;  // N

  int64_t micro_rows() const { return global_batch / (world_size * accumulate); }
  int64_t shard_rows() const { return global_batch / world_size; }
};

// Dataset row indices of micro-batch `micro` of `rank` in `step`, in order.
std::vector<int64_t> MicroBatchRows(const BatchGeometry& g, int64_t step, int rank, int64_t micro);

}  // namespace psync::runtime
