// ReportChannel: how the trainer sends each iteration's Report (used
// bitmap, loss, step time, rank 0's ready order once) without knowing the
// transport; the job session sends them on the Train stream
// (coordinator_client.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace psync::control {

class ReportChannel {
 public:
  virtual ~ReportChannel() = default;
  // `used`: one byte per parameter (non-zero = used by this rank's forward).
  // `loss`, `last_step_ms`, `tokens_per_s`: of the previous step (0 before the first).
  virtual absl::Status SendReport(int64_t iteration, const std::vector<uint8_t>& used, double loss,
                                  double last_step_ms, const std::vector<size_t>& ready_order,
                                  double tokens_per_s) = 0;
};

}  // namespace psync::control
