// QuantileSketch: quantiles of a stream of positive values (step times) in
// bounded space, O(1) work per value.
//
// Exact while it holds at most `exact_up_to` values (4096 by default): the
// q-quantile then is numpy's default (linear interpolation between closest
// ranks), as Quantile() below. Past that it is a log-bucketed histogram
// (DDSketch's scheme): a value v > 0 counts in bucket ceil(log_g(v)) with
// g = (1 + a) / (1 - a), so every value of a bucket is within a relative
// error a of the bucket's representative 2 g^i / (g + 1); a quantile is the
// representative of the bucket holding its rank, so it is within `a` (1%
// by default) of an actual value of that rank. Buckets cover [1e-6, 1e9]
// (in the caller's unit: 1 ns .. 11 days in ms), about 2,200 of them at 1%;
// values outside are clamped into the end buckets, zero and negatives count
// in the lowest one.
//
// Threads: none of its own; one writer, or external locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace psync {

// The q-quantile (0..1) of `values`, linear interpolation between closest
// ranks (numpy's default). NaN for an empty input.
double Quantile(std::vector<double> values, double q);

class QuantileSketch {
 public:
  explicit QuantileSketch(double relative_accuracy = 0.01, size_t exact_up_to = 4096);

  void Add(double v);
  // NaN when empty.
  double Quantile(double q) const;
  int64_t count() const { return count_; }
  bool exact() const { return buckets_.empty(); }
  double relative_accuracy() const { return accuracy_; }
  // Work done by Add so far, in values touched (1 per Add, plus the exact
  // values once when the histogram takes over): what the tests count.
  int64_t work() const { return work_; }

 private:
  size_t Bucket(double v) const;
  void ToHistogram();

  double accuracy_, log_gamma_;
  size_t exact_up_to_;
  int64_t count_ = 0;
  int64_t work_ = 0;
  std::vector<double> exact_;     // while exact()
  std::vector<int64_t> buckets_;  // after: counts by bucket
};

}  // namespace psync
