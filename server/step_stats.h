// StepStats: the slowest-vs-median summary of the ranks' last step times
// that `psyncctl status` and GET /metrics show (job_views.cc fills it under
// JobState's lock; job_metrics.h carries it). Plain values, no job state.
#pragma once

#include <vector>

namespace psync::server {

struct StepStats {
  int slowest_rank = -1;  // -1 = no step times yet
  double slowest_ms = 0, median_ms = 0, slowest_vs_median_pct = 0;
};

// `step_ms[r]` = rank r's last step time (<= 0: none yet).
StepStats ComputeStepStats(const std::vector<double>& step_ms);

}  // namespace psync::server
