#include "common/fixed_histogram.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "psync/common/logging.h"

namespace psync {

FixedHistogram::FixedHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    PSYNC_CHECK(std::isfinite(bounds_[i])) << "histogram bound " << i << " is not finite";
    PSYNC_CHECK(i == 0 || bounds_[i - 1] < bounds_[i]) << "histogram bounds must increase (bound " << i << ")";
  }
}

bool FixedHistogram::Restore(const std::vector<uint64_t>& counts, double sum) {
  if (counts.size() != counts_.size()) return false;
  counts_ = counts;
  sum_ = sum;
  count_ = 0;
  for (uint64_t c : counts_) count_ += c;
  return true;
}

void FixedHistogram::Observe(double v) {
  // Why lower_bound: Prometheus buckets are "less than or equal" (le).
  const size_t b = std::isnan(v) ? bounds_.size()
                                 : static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                                       bounds_.begin());
  ++counts_[b];
  ++count_;
  if (!std::isnan(v)) sum_ += v;
}

}  // namespace psync
