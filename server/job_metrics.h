// What the coordinator's GET /metrics shows (docs/cli-contract.md, "/metrics"):
// JobMetrics is a snapshot of the job taken under JobState's lock
// (JobState::FillMetrics, job_views.cc: a copy of what the job keeps anyway,
// O(world size)); RenderJobMetrics writes it, with the token gate's refusal
// counts, in the Prometheus text format, after the lock is released.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/fixed_histogram.h"
#include "psync/v1/control.pb.h"
#include "server/job_counters.h"
#include "server/step_stats.h"

namespace psync {
class RefusalCounters;  // common/refusal_counters.h
}

namespace psync::server {

// A joined rank of the current generation.
struct RankMetrics {
  int rank = 0;
  v1::WorkerState state = v1::WORKER_STATE_UNSPECIFIED;
  int64_t iteration = -1;          // last reported, -1 = none yet
  double report_age_s = 0;         // since its last report (iteration >= 0)
  double step_ms = 0, loss = 0, tokens_per_s = 0;  // of its last completed step (step_ms > 0)
};

struct JobMetrics {
  std::string job_id;
  int world_size = 0;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  int64_t generation = 0;
  int restarts = 0, max_restarts = 0;
  // RecoveryLog: recoveries by kind, their time and the iterations computed again.
  uint64_t live_recoveries = 0, restart_recoveries = 0, recomputed_iterations = 0;
  double recovery_seconds = 0, last_recovery_seconds = 0;
  // Coordinator failover: this coordinator's epoch, and the coordinators of
  // the job before it on its --state-dir (-1 = unknown: StatusResponse).
  int64_t coordinator_epoch = 0;
  int coordinator_restarts = 0;
  int joined = 0;
  int64_t iteration = -1;          // last plan sent, -1 = none
  std::vector<RankMetrics> ranks;  // joined ranks of the current generation, by rank
  StepStats steps;                 // the straggler measure `psyncctl status` shows
  // Job-wide, all generations (JobCounters).
  std::vector<uint64_t> reports, lost;  // by rank
  uint64_t plans = 0;
  FixedHistogram plan_latency{JobCounters::PlanLatencyBounds()};
};

// The text of GET /metrics. `refusals`: the token gate's counts (null
// without a token: the family is left out).
std::string RenderJobMetrics(const JobMetrics& m, const RefusalCounters* refusals);

}  // namespace psync::server
