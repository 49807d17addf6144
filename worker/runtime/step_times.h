// StepTimes: a run's step times in bounded space with O(1) work per step,
// for the progress line and the --summary (median, p90). A run of 10^6
// steps used to keep every time and sort them all on each progress line.
//   - median / p90 (the summary): the steps after the first 10 (warm-up;
//     all steps when there are 10 or fewer), in a QuantileSketch
//     (common/quantile_sketch.h): exact up to 4096 timed steps, then within
//     1% of an actual step time of that rank;
//   - RecentMedian (the progress line's rate and ETA): the exact median of
//     the last kWindow steps, so a rate reflects the run now, not its
//     history; O(kWindow) per progress line, whatever the step count.
// Threads: one writer (the training thread); copies are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/quantile_sketch.h"

namespace psync::runtime {

class StepTimes {
 public:
  static constexpr int64_t kWarmupSteps = 10;
  static constexpr size_t kWindow = 1000;

  static StepTimes Of(const std::vector<double>& ms);  // Add each, in order

  void Add(double ms);
  int64_t count() const { return count_; }
  // Steps the median and p90 are over.
  int64_t timed() const { return count_ <= kWarmupSteps ? count_ : timed_.count(); }
  // NaN when no step was added.
  double Quantile(double q) const;
  double Median() const { return Quantile(0.5); }
  double P90() const { return Quantile(0.9); }
  double RecentMedian() const;
  // Values touched so far by Add and RecentMedian (tests count work, not time).
  int64_t work() const { return timed_.work() + window_work_; }

 private:
  int64_t count_ = 0;
  std::vector<double> warmup_;  // the first kWarmupSteps
  QuantileSketch timed_;        // every step after them
  std::vector<double> window_;  // ring of the last kWindow steps
  size_t next_ = 0;             // ring position of the next step
  mutable std::vector<double> scratch_;
  mutable int64_t window_work_ = 0;
};

}  // namespace psync::runtime
