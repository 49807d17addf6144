#include "server/job_counters.h"

namespace psync::server {

JobCounters::JobCounters(int world_size)
    : reports_(static_cast<size_t>(world_size), 0),
      lost_(static_cast<size_t>(world_size), 0),
      plan_latency_(PlanLatencyBounds()) {}

std::vector<double> JobCounters::PlanLatencyBounds() {
  // Why this range: a plan takes ~0.1-1 ms when the reports come together
  // (bench/README.md, the coordinator bench), and waits up to a whole step
  // of the slowest rank when they do not (seconds, for a large model).
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

void JobCounters::PlanEmitted(const std::vector<Clock::time_point>& arrivals, Clock::time_point now) {
  ++plans_;
  for (const Clock::time_point& t : arrivals) {
    plan_latency_.Observe(std::chrono::duration<double>(now - t).count());
  }
}

void JobCounters::Restore(const std::vector<uint64_t>& reports, const std::vector<uint64_t>& lost, uint64_t plans,
                          const std::vector<uint64_t>& plan_latency_counts, double plan_latency_sum) {
  for (size_t r = 0; r < reports_.size() && r < reports.size(); ++r) reports_[r] = reports[r];
  for (size_t r = 0; r < lost_.size() && r < lost.size(); ++r) lost_[r] = lost[r];
  plans_ = plans;
  plan_latency_.Restore(plan_latency_counts, plan_latency_sum);
}

}  // namespace psync::server
