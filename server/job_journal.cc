#include "server/job_journal.h"

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace psync::server {

v1::JournalState JobJournal::Snapshot(const JobState& j) {
  v1::JournalState s;
  std::vector<v1::Event> events = j.events_.After(0);  // the log's own lock, not JobState's
  std::lock_guard<std::mutex> l(j.mu_);
  s.set_coordinator_restarts(std::max(j.resume_.coordinator_restarts, 0));
  s.set_state(j.state_);
  s.set_reason(j.reason_);
  s.set_generation(j.gen_->number());
  s.set_iteration(j.gen_->plans().last_plan());
  s.set_restarts(j.restarts_);
  s.set_last_restart_reason(j.gen_->previous_end());
  s.set_world_change_reason(j.elastic_.note());
  s.set_last_world_size(j.elastic_.last_world_size());
  for (uint64_t n : j.counters_.reports()) s.add_reports(n);
  for (uint64_t n : j.counters_.lost()) s.add_lost(n);
  s.set_plans(j.counters_.plans());
  for (uint64_t n : j.counters_.plan_latency().counts()) s.add_plan_latency_counts(n);
  s.set_plan_latency_sum(j.counters_.plan_latency().sum());
  s.set_live_recoveries(j.recoveries_.live());
  s.set_restart_recoveries(j.recoveries_.restarted());
  s.set_recomputed_iterations(j.recoveries_.recomputed());
  s.set_recovery_seconds(j.recoveries_.total_seconds());
  s.set_last_recovery_seconds(j.recoveries_.last_seconds());
  for (v1::Event& e : events) *s.add_events() = std::move(e);
  return s;
}

void JobJournal::Restore(JobState& j, const v1::JournalState& prev, const std::string& dir) {
  j.events_.Restore(std::vector<v1::Event>(prev.events().begin(), prev.events().end()));
  std::lock_guard<std::mutex> l(j.mu_);
  j.resume_.coordinator_restarts = prev.coordinator_restarts() + 1;
  j.resume_.restored_restarts = j.restarts_ = prev.restarts();
  j.elastic_.Restore(prev.world_change_reason(), prev.last_world_size());
  j.counters_.Restore({prev.reports().begin(), prev.reports().end()}, {prev.lost().begin(), prev.lost().end()},
                      prev.plans(), {prev.plan_latency_counts().begin(), prev.plan_latency_counts().end()},
                      prev.plan_latency_sum());
  j.recoveries_.Restore(prev.live_recoveries(), prev.restart_recoveries(), prev.recomputed_iterations(),
                        prev.recovery_seconds(), prev.last_recovery_seconds());
  switch (prev.state()) {
    case v1::JOB_FINISHED:
    case v1::JOB_ABORTED:
      // Why stay ended: the job's end was told to everyone already; a
      // coordinator started again must not let it run a second time.
      j.state_ = prev.state();
      j.reason_ = prev.reason();
      break;
    case v1::JOB_WAITING:
      // Why open the same generation again: the workers were forming it
      // (a restart, a regroup) and their Joins name it; generation 1 would
      // refuse them.
      if (prev.generation() > 1) {
        j.gen_ = std::make_unique<Generation>(j.cfg_, prev.generation(), prev.last_restart_reason());
        j.events_.SetGeneration(prev.generation());
        j.resume_.restored_generation = prev.generation();
        j.elastic_.Arm(prev.generation());
      }
      break;
    case v1::JOB_STOPPING:
      // A shutdown the workers may not hold yet (no plan carried it before
      // the old coordinator died): asked again once they resume.
      j.resume_.pending_stop = prev.reason();
      break;
    default:
      break;
  }
  j.events_.Append(v1::EVENT_COORDINATOR_RESTARTED, -1, prev.iteration(),
                   absl::StrCat("coordinator restarted (epoch ", j.cfg_.epoch, ", restart ",
                                j.resume_.coordinator_restarts, " on --state-dir ", dir, "): the job was ",
                                v1::JobState_Name(prev.state()), " at generation ", prev.generation(),
                                ", iteration ", prev.iteration(), " (epoch ", prev.epoch(), ")"));
}

void JobJournal::SetLeaseCheck(JobState& j, std::function<int64_t()> newer_epoch) {
  std::lock_guard<std::mutex> l(j.mu_);
  j.resume_.newer_epoch = std::move(newer_epoch);
  j.resume_.journaled = true;
}

}  // namespace psync::server
