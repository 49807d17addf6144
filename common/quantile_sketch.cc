#include "common/quantile_sketch.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace psync {
namespace {

constexpr double kMinValue = 1e-6;
constexpr double kMaxValue = 1e9;

}  // namespace

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(values.size() - 1, lo + 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

QuantileSketch::QuantileSketch(double relative_accuracy, size_t exact_up_to)
    : accuracy_(relative_accuracy),
      log_gamma_(std::log((1 + relative_accuracy) / (1 - relative_accuracy))),
      exact_up_to_(exact_up_to) {
  exact_.reserve(std::min<size_t>(exact_up_to_, 1024));
}

size_t QuantileSketch::Bucket(double v) const {
  const double x = std::clamp(v, kMinValue, kMaxValue);
  // Bucket 0 holds kMinValue; i holds (g^(i-1+o), g^(i+o)] with o the offset of kMinValue.
  const double lowest = std::ceil(std::log(kMinValue) / log_gamma_);
  return static_cast<size_t>(std::ceil(std::log(x) / log_gamma_) - lowest);
}

void QuantileSketch::ToHistogram() {
  buckets_.assign(Bucket(kMaxValue) + 1, 0);
  for (double v : exact_) ++buckets_[Bucket(v)];
  work_ += static_cast<int64_t>(exact_.size());
  exact_.clear();
  exact_.shrink_to_fit();
}

void QuantileSketch::Add(double v) {
  ++count_;
  ++work_;
  if (buckets_.empty()) {
    exact_.push_back(v);
    if (exact_.size() > exact_up_to_) ToHistogram();
    return;
  }
  ++buckets_[Bucket(v)];
}

double QuantileSketch::Quantile(double q) const {
  if (count_ == 0) return std::numeric_limits<double>::quiet_NaN();
  if (buckets_.empty()) return psync::Quantile(exact_, q);
  // The value of rank floor(q * (n - 1)) (0-based): within the bucket accuracy.
  const int64_t rank = static_cast<int64_t>(std::floor(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_ - 1)));
  const double lowest = std::ceil(std::log(kMinValue) / log_gamma_);
  int64_t seen = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (seen > rank) {
      const double gamma = std::exp(log_gamma_);
      return 2 * std::exp((static_cast<double>(i) + lowest) * log_gamma_) / (gamma + 1);
    }
  }
  return kMaxValue;
}

}  // namespace psync
