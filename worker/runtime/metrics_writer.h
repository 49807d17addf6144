// Per-step metrics as JSON lines (one object per completed step), written
// by every rank to its own file (--metrics=DIR/metrics-{rank}.jsonl) and
// read by scripts/plot-run.sh:
//
//   {"step": 12, "loss": 2.413, "val_loss": null, "val_accuracy": null, "lr": 0.001,
//    "grad_norm": 0.82, "step_ms": 21.4, "tokens_per_s": 11963.2}
//
// step counts completed steps (1 = after the first optimizer step).
// Unknown values (no evaluation this step, no clipping) are null. Each line
// is flushed as written, so a killed run keeps every completed step.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace psync::runtime {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double val_loss;       // NaN: not evaluated this step
  double val_accuracy;   // NaN: not evaluated, or regression
  double lr = 0;
  double grad_norm;      // NaN: not computed (no clipping)
  double step_ms = 0;
  double tokens_per_s = 0;  // examples per second for row/image data
  StepMetrics();
};

class MetricsWriter {
 public:
  // Opens `path` for writing. With `keep_through_step` >= 0 (a resumed run)
  // the lines of steps up to it are kept and later ones dropped, so the file
  // reads as one uninterrupted run; otherwise the file starts empty.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path, int64_t keep_through_step = -1);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  absl::Status Write(const StepMetrics& m);
  // The JSON line of `m` (no newline).
  static std::string Format(const StepMetrics& m);

 private:
  MetricsWriter(std::string path, std::FILE* f) : path_(std::move(path)), file_(f) {}
  std::string path_;
  std::FILE* file_;
};

}  // namespace psync::runtime
