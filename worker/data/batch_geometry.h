// The part of the sharding contract every format shares: which slots k of
// the step's global batch a micro-batch holds.
//
//   step s, global batch B: slots k = 0..B-1 (global example s*B + k)
//   rank r owns slots [r*B/W, (r+1)*B/W)
//   micro-batch m of rank r: the m-th of M contiguous slices of those,
//   slots [r*B/W + m*B/(W*M), r*B/W + (m+1)*B/(W*M))
//
// What a slot holds is the format's business: a row or image index
// (example_order.h) or a token offset (token_dataset.h).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace psync::data {

// OK when W >= 1, 0 <= rank < W, M >= 1, 0 <= micro < M, step >= 0, B >= 1
// and B divisible by W*M; otherwise InvalidArgument naming the field.
absl::Status ValidateBatchSpec(const BatchSpec& spec);

// B / (W*M): examples per micro-batch.
int64_t MicroBatchSize(const BatchSpec& spec);
// The slot k of the micro-batch's first example.
int64_t FirstSlot(const BatchSpec& spec);

// Elastic worlds: the micro-batches M' per step when a job planned for
// `planned_world` ranks with `accumulate` (M) micro-batches runs on `world`
// ranks. The global batch B stays; each rank's share B/world grows as the
// world shrinks, and M' is the smallest M' >= M that splits it into whole
// micro-batches no larger than the planned B/(planned_world*M), the size a
// rank's memory was sized for. planned_world <= 0 means `world`.
// InvalidArgument naming B when B does not split over `world` ranks.
absl::StatusOr<int64_t> AccumulateForWorld(int64_t global_batch, int64_t accumulate, int planned_world, int world);

}  // namespace psync::data
