// Run statistics: step times, losses, and the --summary JSON each rank
// writes at exit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/quantile_sketch.h"
#include "worker/runtime/step_times.h"

namespace psync::runtime {

// numpy's default quantile (common/quantile_sketch.h).
using ::psync::Quantile;

struct RunSummary {
  int rank = -1;
  int world_size = 0;
  int64_t steps_requested = 0;
  int64_t steps_completed = 0;
  double final_loss = 0;              // this rank's loss of its last completed step (NaN if none)
  double val_loss = 0;                // the last evaluation's (NaN if none)
  double val_accuracy = 0;            // the last evaluation's top-1 (NaN if none, or regression)
  double items_per_s = 0;             // tokens (language model) or examples per second over all ranks
  std::string model, data;            // Describe() of each
  StepTimes step_ms;                  // wall time of the completed steps (bounded: step_times.h)
  std::string exit_reason;
  int exit_code = 0;
  std::string backend, device;
  double total_s = 0;
  // Memory this rank holds at the end of the run (-1: unknown, not written):
  // optimizer state (moments, momentum, step counts; 1/W of it with
  // --zero), gradient storage (the reducer's buckets; the shards and one
  // staging bucket with --zero=2|3), parameter storage (--zero=3: the shards
  // plus the most gathered at once), and on CUDA the device memory pool's
  // high-water mark.
  int64_t optimizer_state_bytes = -1;
  int64_t gradient_bytes = -1;
  int64_t parameter_bytes = -1;  // the parameters' storage (--zero=3: the shards plus the window)
  int64_t parameter_window_bytes = -1;  // --zero=3: of it, the buffers parameters are gathered into
  int64_t peak_device_bytes = -1;
  int64_t activation_bytes = -1;  // the last step's forward: what it left held for backward (TrainResult)

  // Over the steps after the first 10 (all steps when there are 10 or
  // fewer); exact up to 4096 of them, then within 1% (step_times.h).
  double median_step_ms() const { return step_ms.Median(); }
  double p90_step_ms() const { return step_ms.P90(); }

  // {"rank":..,"steps_completed":..,"final_loss":..,"median_step_ms":..,
  //  "p90_step_ms":..,"exit_reason":..,...}
  std::string ToJson() const;
  absl::Status WriteJson(const std::string& path) const;
};

}  // namespace psync::runtime
