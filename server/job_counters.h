// JobCounters: what /metrics counts over the whole job, across generations:
// each rank's reports and how often it was declared lost, the plans sent,
// and the plan latency: for every report, the time from its arrival at the
// coordinator to the emission of the plan of its iteration (how long that
// rank's report waited for the slowest report of the iteration, plus the
// aggregation). The test-only plan delay (--test-only-plan-delay) comes
// after emission and is not in it.
//
// Part of JobState (job_state.h), under its lock, updated where JobState
// already holds it: O(1) per report (one histogram step, O(log B), per
// report when its plan is emitted). Read by JobState::FillMetrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "common/fixed_histogram.h"

namespace psync::server {

class JobCounters {
 public:
  using Clock = std::chrono::steady_clock;
  explicit JobCounters(int world_size);

  // Plan latency buckets, seconds: 100 us .. 10 s (Prometheus's `le`).
  static std::vector<double> PlanLatencyBounds();

  void Reported(int rank) { ++reports_[static_cast<size_t>(rank)]; }
  void Lost(int rank) { ++lost_[static_cast<size_t>(rank)]; }
  // A plan is emitted at `now`; `arrivals[r]`: when rank r's report of its
  // iteration arrived (PlanAggregator::PendingArrivals).
  void PlanEmitted(const std::vector<Clock::time_point>& arrivals, Clock::time_point now);

  // Continues from the counts an earlier coordinator of the job kept
  // (server/job_journal.h); a count by rank beyond the world is dropped.
  void Restore(const std::vector<uint64_t>& reports, const std::vector<uint64_t>& lost, uint64_t plans,
               const std::vector<uint64_t>& plan_latency_counts, double plan_latency_sum);

  const std::vector<uint64_t>& reports() const { return reports_; }  // by rank
  const std::vector<uint64_t>& lost() const { return lost_; }        // by rank
  uint64_t plans() const { return plans_; }
  const FixedHistogram& plan_latency() const { return plan_latency_; }

 private:
  std::vector<uint64_t> reports_, lost_;
  uint64_t plans_ = 0;
  FixedHistogram plan_latency_;
};

}  // namespace psync::server
