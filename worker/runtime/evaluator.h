// Held-out evaluation, sharded over the ranks of the job: rank r evaluates
// examples [r*E/W, (r+1)*E/W) of the validation set in fixed-size batches
// (forward only, no graph), then the ranks exchange their sums and every
// rank gets the same totals (summed in rank order: same bits everywhere).
#pragma once

#include <chrono>
#include <cstdint>

#include "absl/status/statusor.h"
#include "psync/comm/process_group.h"
#include "worker/data/dataset.h"
#include "psync/nn/models/model.h"

namespace psync::runtime {

struct EvalResult {
  double loss = 0;      // mean per example (per token for a language model)
  double accuracy = 0;  // classification / language model: top-1; NaN for regression
  int64_t count = 0;    // examples (tokens) evaluated over all ranks
};

struct EvalOptions {
  int64_t batch = 64;         // examples per forward
  int64_t max_examples = 0;   // 0 = the whole set; else the first max_examples
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// `group` may be null (one process).
absl::StatusOr<EvalResult> EvaluateSharded(nn::Model& model, const data::Dataset& val, Device device,
                                           comm::ProcessGroup* group, const EvalOptions& options);

}  // namespace psync::runtime
