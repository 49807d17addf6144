#include "server/job_views.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "common/used_bitmap.h"
#include "server/job_metrics.h"

namespace psync::server {

std::vector<int> TrainStreamNumbers(const std::vector<RankRuntime>& ranks) {
  std::map<const PlanSink*, int> number;
  std::vector<int> out(ranks.size(), 0);
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].attached || ranks[r].stream == nullptr) continue;
    out[r] = number.emplace(ranks[r].stream, static_cast<int>(number.size()) + 1).first->second;
  }
  return out;
}

void FillWorkerInfo(int rank, const MemberIdentity& id, const RankRuntime& rt, int train_stream,
                    v1::WorkerInfo* w) {
  w->set_rank(rank);
  w->set_hostname(id.hostname);
  w->set_host_id(id.host_id);
  w->set_pid(id.pid);
  w->set_device(id.device);
  w->set_state(rt.state);
  w->set_last_iteration(rt.last_iteration);
  w->set_last_step_ms(rt.last_step_ms);
  w->set_last_loss(rt.last_loss);
  w->set_exit_reason(rt.exit_reason);
  w->set_last_report_unix_ms(rt.last_report_unix_ms);
  w->set_train_stream(train_stream);
}

void Generation::FillWorkers(v1::WorkersResponse* out) const {
  const std::vector<int> streams = TrainStreamNumbers(ranks_);
  for (int r = 0; r < world_size(); ++r) {
    if (!rendezvous_.member(r).joined) continue;
    FillWorkerInfo(r, rendezvous_.member(r), rank(r), streams[static_cast<size_t>(r)], out->add_workers());
  }
}

void Generation::FillStatus(v1::StatusResponse* out) const {
  out->set_joined(rendezvous_.joined());
  out->set_generation(number_);
  out->set_last_restart_reason(previous_end_);
  out->set_iteration(plans_.last_plan());
  out->set_stop_after_iteration(plans_.stop_scheduled() ? plans_.stop_after() : -1);
  out->set_backend(rendezvous_.backend());
  out->set_start_iteration(rendezvous_.has_reference() ? rendezvous_.start_iteration() : 0);
  std::vector<double> step_ms(ranks_.size(), 0.0);
  const std::vector<int> streams = TrainStreamNumbers(ranks_);
  for (int r = 0; r < world_size(); ++r) {
    if (!rendezvous_.member(r).joined) continue;
    FillWorkerInfo(r, rendezvous_.member(r), rank(r), streams[static_cast<size_t>(r)], out->add_workers());
    step_ms[static_cast<size_t>(r)] = rank(r).last_step_ms;
  }
  const StepStats s = ComputeStepStats(step_ms);
  out->set_slowest_rank(s.slowest_rank);
  if (s.slowest_rank >= 0) {
    out->set_slowest_step_ms(s.slowest_ms);
    out->set_median_step_ms(s.median_ms);
    out->set_slowest_vs_median_pct(s.slowest_vs_median_pct);
  }
}

void Generation::FillMetrics(Clock::time_point now, JobMetrics* out) const {
  out->generation = number_;
  out->joined = rendezvous_.joined();
  out->iteration = plans_.last_plan();
  std::vector<double> step_ms(ranks_.size(), 0.0);
  for (int r = 0; r < world_size(); ++r) {
    if (!rendezvous_.member(r).joined) continue;
    const RankRuntime& rt = rank(r);
    RankMetrics m;
    m.rank = r;
    m.state = rt.state;
    m.iteration = rt.last_iteration;
    // Why last_activity: once a rank reported, it is the time of its last
    // report (set by Report; attaching comes before any report).
    if (rt.last_iteration >= 0) m.report_age_s = std::chrono::duration<double>(now - rt.last_activity).count();
    m.step_ms = rt.last_step_ms;
    m.loss = rt.last_loss;
    m.tokens_per_s = rt.last_tokens_per_s;
    out->ranks.push_back(m);
    step_ms[static_cast<size_t>(r)] = rt.last_step_ms;
  }
  out->steps = ComputeStepStats(step_ms);
}

void Generation::FillBuckets(v1::BucketsResponse* out) const {
  if (!rendezvous_.has_reference()) return;
  *out->mutable_plan() = plans_.current_bucket_plan();
  for (const auto& p : rendezvous_.manifest()) out->add_param_names(p.name());
  out->set_bucket_cap_bytes(rendezvous_.bucket_cap());
  out->set_first_bucket_cap_bytes(rendezvous_.first_bucket_cap());
}

void Generation::FillUnused(v1::UnusedResponse* out) const {
  out->set_iteration(plans_.last_plan());
  out->set_num_params(static_cast<int>(rendezvous_.manifest().size()));
  if (plans_.last_plan() < 0) return;
  const std::string& unused = plans_.last_unused();
  for (int64_t i = 0; i < static_cast<int64_t>(rendezvous_.manifest().size()); ++i) {
    if (bitmap::Get(unused, i)) {
      out->add_param_index(static_cast<int>(i));
      out->add_param_names(rendezvous_.manifest()[static_cast<size_t>(i)].name());
    }
  }
}

namespace {

// StatusResponse.instance_id: 64 random bits in hex, drawn once per process
// (thread-safe static), so a client that sees it change talks to another
// coordinator process; two started in the same millisecond still differ (a
// start time would not).
const std::string& InstanceId() {
  static const std::string id = [] {
    std::random_device rd;
    return absl::StrFormat("%016x", (static_cast<uint64_t>(rd()) << 32) ^ rd());
  }();
  return id;
}

}  // namespace

// The job-wide part of the views (JobState's friend, called under its
// lock), so the state machine's class holds transitions, not formatting.
struct JobViews {
  static void Status(const JobState& j, v1::StatusResponse* out) {
    out->set_job_id(j.cfg_.job_id);
    out->set_world_size(j.gen_->world_size());
    out->set_max_world_size(j.cfg_.world_size);
    out->set_min_world_size(j.cfg_.min_world_size);
    out->set_world_change_reason(j.elastic_.note());
    out->set_state(j.state_);
    out->set_reason(j.reason_);
    out->set_plan_lookahead(j.cfg_.plan_lookahead);
    out->set_restarts(j.restarts_);
    out->set_max_restarts(j.cfg_.max_restarts);
    out->set_recovery(RecoveryName(j.cfg_.recovery));
    out->set_live_recoveries(static_cast<int32_t>(j.recoveries_.live()));
    out->set_last_recovery_s(j.recoveries_.last_seconds());
    out->set_recomputed_iterations(static_cast<int64_t>(j.recoveries_.recomputed()));
    out->set_instance_id(InstanceId());
    out->set_coordinator_epoch(j.cfg_.epoch);
    out->set_coordinator_restarts(j.resume_.coordinator_restarts);
    out->set_uptime_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(JobState::Clock::now() - j.start_time_).count());
    j.gen_->FillStatus(out);
  }
  static void Metrics(const JobState& j, JobMetrics* out) {
    out->job_id = j.cfg_.job_id;
    out->world_size = j.gen_->world_size();
    out->state = j.state_;
    out->restarts = j.restarts_;
    out->max_restarts = j.cfg_.max_restarts;
    out->live_recoveries = j.recoveries_.live();
    out->restart_recoveries = j.recoveries_.restarted();
    out->recovery_seconds = j.recoveries_.total_seconds();
    out->last_recovery_seconds = j.recoveries_.last_seconds();
    out->recomputed_iterations = j.recoveries_.recomputed();
    out->coordinator_epoch = j.cfg_.epoch;
    out->coordinator_restarts = j.resume_.coordinator_restarts;
    out->reports = j.counters_.reports();
    out->lost = j.counters_.lost();
    out->plans = j.counters_.plans();
    out->plan_latency = j.counters_.plan_latency();
    j.gen_->FillMetrics(JobState::Clock::now(), out);
  }
};

void JobState::FillStatus(v1::StatusResponse* out) const {
  std::lock_guard<std::mutex> l(mu_);
  JobViews::Status(*this, out);
}

void JobState::FillMetrics(JobMetrics* out) const {
  std::lock_guard<std::mutex> l(mu_);
  JobViews::Metrics(*this, out);
}

void JobState::FillWorkers(v1::WorkersResponse* out) const {
  std::lock_guard<std::mutex> l(mu_);
  gen_->FillWorkers(out);
}

void JobState::FillBuckets(v1::BucketsResponse* out) const {
  std::lock_guard<std::mutex> l(mu_);
  gen_->FillBuckets(out);
}

void JobState::FillUnused(v1::UnusedResponse* out) const {
  std::lock_guard<std::mutex> l(mu_);
  gen_->FillUnused(out);
}

}  // namespace psync::server
