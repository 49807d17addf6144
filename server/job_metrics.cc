#include "server/job_metrics.h"

#include <string>

#include "absl/strings/ascii.h"
#include "common/prometheus_text.h"
#include "common/refusal_counters.h"

namespace psync::server {
namespace {

using Type = PrometheusText::Type;

std::string Lower(const std::string& s) { return absl::AsciiStrToLower(s); }

// "JOB_RUNNING" -> "running", "WORKER_TRAINING" -> "training".
std::string StateName(const std::string& enum_name, const char* prefix) {
  return Lower(enum_name.substr(std::string(prefix).size()));
}

void RenderJob(const JobMetrics& m, PrometheusText* t) {
  t->Family("psync_job_info", Type::kGauge, "The job this coordinator runs (always 1).");
  t->Sample({{"job_id", m.job_id}}, 1);
  t->Family("psync_job_state", Type::kGauge, "1 for the job's current state, 0 for the others.");
  for (v1::JobState s : {v1::JOB_WAITING, v1::JOB_RUNNING, v1::JOB_STOPPING, v1::JOB_FINISHED, v1::JOB_ABORTED}) {
    t->Sample({{"state", StateName(v1::JobState_Name(s), "JOB_")}}, m.state == s ? 1 : 0);
  }
  t->Family("psync_world_size", Type::kGauge, "Ranks in the job (--world-size).");
  t->Sample(m.world_size);
  t->Family("psync_ranks_joined", Type::kGauge, "Ranks that joined the current generation.");
  t->Sample(m.joined);
  t->Family("psync_ranks", Type::kGauge, "Joined ranks of the current generation by state.");
  for (v1::WorkerState s : {v1::WORKER_JOINED, v1::WORKER_TRAINING, v1::WORKER_DONE, v1::WORKER_LOST}) {
    int n = 0;
    for (const RankMetrics& r : m.ranks) n += r.state == s ? 1 : 0;
    t->Sample({{"state", StateName(v1::WorkerState_Name(s), "WORKER_")}}, n);
  }
  t->Family("psync_generation", Type::kGauge, "Current generation (1 + restarts).");
  t->Sample(static_cast<double>(m.generation));
  t->Family("psync_restarts_total", Type::kCounter, "Generations aborted by a lost rank and formed again.");
  t->Sample(m.restarts);
  t->Family("psync_max_restarts", Type::kGauge, "Restarts allowed (--max-restarts).");
  t->Sample(m.max_restarts);
  t->Family("psync_coordinator_epoch", Type::kGauge,
            "This coordinator's epoch (its start, ms since 1970, above every earlier one on its --state-dir).");
  t->Sample(static_cast<double>(m.coordinator_epoch));
  // Why left out when unknown: a coordinator that adopted a running job
  // without a --state-dir cannot count the ones before it, and a missing
  // series says "unknown" where a number would be a guess.
  if (m.coordinator_restarts >= 0) {
    t->Family("psync_coordinator_restarts_total", Type::kCounter,
              "Coordinators of this job started before this one on its --state-dir.");
    t->Sample(m.coordinator_restarts);
  }
  t->Family("psync_recoveries_total", Type::kCounter,
            "Losses the job recovered from, by how: live (the survivors stayed, --recovery=live) or restart.");
  t->Sample({{"mode", "live"}}, static_cast<double>(m.live_recoveries));
  t->Sample({{"mode", "restart"}}, static_cast<double>(m.restart_recoveries));
  t->Family("psync_recovery_seconds_total", Type::kCounter,
            "Time from each loss to the next generation's complete world, summed over the recoveries.");
  t->Sample(m.recovery_seconds);
  t->Family("psync_last_recovery_seconds", Type::kGauge, "The newest recovery's time (0: none yet).");
  t->Sample(m.last_recovery_seconds);
  t->Family("psync_recomputed_iterations_total", Type::kCounter,
            "Iterations the ranks had started before a loss that the next generation computed again.");
  t->Sample(static_cast<double>(m.recomputed_iterations));
  t->Family("psync_iteration", Type::kGauge, "Last iteration whose plan was sent to every rank (-1: none yet).");
  t->Sample(static_cast<double>(m.iteration));
  t->Family("psync_plans_total", Type::kCounter,
            "Plans sent, one per iteration, all generations (rate(): iterations per second).");
  t->Sample(static_cast<double>(m.plans));
  t->Family("psync_plan_latency_seconds", Type::kHistogram,
            "For each report, from its arrival at the coordinator to the emission of its iteration's plan "
            "(waiting for the iteration's last report, then aggregating).");
  t->Histogram({}, m.plan_latency.bounds(), m.plan_latency.counts(), m.plan_latency.sum());
}

void RenderRanks(const JobMetrics& m, PrometheusText* t) {
  auto per_rank = [&](const char* name, const char* help, auto has, auto value) {
    t->Family(name, Type::kGauge, help);
    for (const RankMetrics& r : m.ranks) {
      if (has(r)) t->Sample({{"rank", std::to_string(r.rank)}}, value(r));
    }
  };
  auto reported = [](const RankMetrics& r) { return r.iteration >= 0; };
  auto stepped = [](const RankMetrics& r) { return r.step_ms > 0; };
  per_rank("psync_rank_iteration", "Last iteration the rank reported.", reported,
           [](const RankMetrics& r) { return static_cast<double>(r.iteration); });
  per_rank("psync_rank_last_report_age_seconds", "Time since the rank's last report.", reported,
           [](const RankMetrics& r) { return r.report_age_s; });
  per_rank("psync_rank_step_seconds", "Wall time of the rank's last completed step.", stepped,
           [](const RankMetrics& r) { return r.step_ms / 1000.0; });
  per_rank("psync_rank_loss", "Training loss of the rank's last completed step.", stepped,
           [](const RankMetrics& r) { return r.loss; });
  per_rank("psync_rank_tokens_per_second", "Tokens (examples, for a classifier) the rank processed per second "
           "in its last completed step.", stepped, [](const RankMetrics& r) { return r.tokens_per_s; });
  auto counter = [&](const char* name, const char* help, const std::vector<uint64_t>& by_rank) {
    t->Family(name, Type::kCounter, help);
    for (size_t r = 0; r < by_rank.size(); ++r) t->Sample({{"rank", std::to_string(r)}}, static_cast<double>(by_rank[r]));
  };
  counter("psync_rank_reports_total", "Reports the coordinator accepted from the rank, all generations.", m.reports);
  counter("psync_rank_lost_total", "Times the rank was declared lost, all generations.", m.lost);
}

void RenderStragglers(const JobMetrics& m, PrometheusText* t) {
  // The same numbers as `psyncctl status` ("slowest rank R: X ms per step
  // (median Y ms, +Z%)"), from each rank's last step; absent until a step.
  const StepStats& s = m.steps;
  const bool any = s.slowest_rank >= 0;
  t->Family("psync_step_slowest_rank", Type::kGauge, "Rank whose last step was the slowest.");
  if (any) t->Sample(s.slowest_rank);
  t->Family("psync_step_slowest_seconds", Type::kGauge, "The slowest rank's last step time.");
  if (any) t->Sample(s.slowest_ms / 1000.0);
  t->Family("psync_step_median_seconds", Type::kGauge, "Median over the ranks of their last step time.");
  if (any) t->Sample(s.median_ms / 1000.0);
  t->Family("psync_step_slowest_vs_median_ratio", Type::kGauge,
            "(slowest - median) / median of the last step times: the straggler measure (0.1 = 10% slower).");
  if (any) t->Sample(s.slowest_vs_median_pct / 100.0);
}

}  // namespace

std::string RenderJobMetrics(const JobMetrics& m, const RefusalCounters* refusals) {
  PrometheusText t;
  RenderJob(m, &t);
  RenderRanks(m, &t);
  RenderStragglers(m, &t);
  if (refusals != nullptr) {
    t.Family("psync_refused_calls_total", Type::kCounter,
             "Calls refused for want of the token, before their message was read, by gRPC method.");
    for (const RefusalCounters::Entry& e : refusals->Snapshot()) {
      t.Sample({{"method", e.method}}, static_cast<double>(e.count));
    }
  }
  return t.Take();
}

}  // namespace psync::server
