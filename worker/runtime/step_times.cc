#include "worker/runtime/step_times.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace psync::runtime {

StepTimes StepTimes::Of(const std::vector<double>& ms) {
  StepTimes t;
  for (double v : ms) t.Add(v);
  return t;
}

void StepTimes::Add(double ms) {
  ++count_;
  if (count_ <= kWarmupSteps) {
    warmup_.push_back(ms);
  } else {
    timed_.Add(ms);
  }
  if (window_.size() < kWindow) {
    window_.push_back(ms);
  } else {
    window_[next_] = ms;
  }
  next_ = (next_ + 1) % kWindow;
}

double StepTimes::Quantile(double q) const {
  if (count_ <= kWarmupSteps) return psync::Quantile(warmup_, q);
  return timed_.Quantile(q);
}

double StepTimes::RecentMedian() const {
  if (window_.empty()) return std::numeric_limits<double>::quiet_NaN();
  scratch_.assign(window_.begin(), window_.end());
  window_work_ += static_cast<int64_t>(scratch_.size());
  const size_t n = scratch_.size();
  auto mid = scratch_.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(scratch_.begin(), mid, scratch_.end());
  if (n % 2 == 1) return *mid;
  const double upper = *mid;
  const double lower = *std::max_element(scratch_.begin(), mid);
  return (lower + upper) / 2;
}

}  // namespace psync::runtime
