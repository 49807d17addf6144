#include "server/step_stats.h"

#include <algorithm>

namespace psync::server {

StepStats ComputeStepStats(const std::vector<double>& step_ms) {
  StepStats s;
  std::vector<double> steps;
  for (size_t r = 0; r < step_ms.size(); ++r) {
    if (step_ms[r] <= 0) continue;
    steps.push_back(step_ms[r]);
    if (step_ms[r] > s.slowest_ms) {
      s.slowest_ms = step_ms[r];
      s.slowest_rank = static_cast<int>(r);
    }
  }
  if (steps.empty()) return s;
  std::sort(steps.begin(), steps.end());
  const size_t n = steps.size();
  s.median_ms = n % 2 ? steps[n / 2] : 0.5 * (steps[n / 2 - 1] + steps[n / 2]);
  s.slowest_vs_median_pct = s.median_ms > 0 ? (s.slowest_ms - s.median_ms) / s.median_ms * 100.0 : 0.0;
  return s;
}

}  // namespace psync::server
