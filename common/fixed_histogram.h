// FixedHistogram: counts of values in buckets with fixed upper bounds, the
// shape of a Prometheus histogram (a value v counts in the first bucket
// whose bound b has v <= b; the last bucket, +Inf, takes the rest). O(log B)
// per value, no allocation after construction; the coordinator's plan
// latency (server/job_counters.h).
//
// Threads: none of its own; one writer, or external locking.
#pragma once

#include <cstdint>
#include <vector>

namespace psync {

class FixedHistogram {
 public:
  // `bounds`: finite, strictly increasing (a bug otherwise: PSYNC_CHECK).
  explicit FixedHistogram(std::vector<double> bounds);

  // NaN counts in the +Inf bucket and adds nothing to the sum.
  void Observe(double v);
  // Takes `counts` (as counts() returns them) and `sum`, e.g. kept by an
  // earlier process; false (nothing changed) when `counts` has another size.
  bool Restore(const std::vector<uint64_t>& counts, double sum);

  const std::vector<double>& bounds() const { return bounds_; }
  // counts()[i]: values in (bounds[i-1], bounds[i]]; counts().back(): above
  // the last bound. Not cumulative (PrometheusText::Histogram makes them so).
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // bounds_.size() + 1
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace psync
