#include "server/job_resume.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "server/generation.h"
#include "server/liveness_policy.h"  // DurationText

namespace psync::server {
bool JobResume::Fenced(JobState& j, Outbox* out) {
  const int64_t newer = j.resume_.newer_epoch ? j.resume_.newer_epoch() : 0;
  if (newer <= 0) return false;
  if (!j.resume_.fenced) {
    j.resume_.fenced = true;
    const std::string why = absl::StrCat("coordinator epoch ", newer, " took over the --state-dir of job '",
                                         j.cfg_.job_id, "' from this coordinator (epoch ", j.cfg_.epoch,
                                         "): a newer coordinator drives the job; this one stops");
    if (j.resume_.fenced_hook) out->Call([hook = j.resume_.fenced_hook, why] { hook(why); });
  }
  return true;
}

absl::Status JobResume::Resume(JobState& j, const v1::Hello& hello, Outbox* out) {
  const v1::Resume& res = hello.resume();
  if (Fenced(j, out)) {
    return absl::FailedPreconditionError(absl::StrCat("this coordinator (epoch ", j.cfg_.epoch,
                                                      ") was replaced by a newer one; it drives no rank"));
  }
  if (hello.ranks_size() > 0) {
    return absl::InvalidArgumentError("hello.resume is for a rank's own Train stream, not a host stream (hello.ranks)");
  }
  if (res.epoch() > j.cfg_.epoch) {
    // Why stop: the workers obeyed a coordinator that started after this
    // one; this one was replaced (it was paused, or cut off) and must not
    // drive anyone.
    const std::string why = absl::StrCat("rank ", hello.rank(), " of job '", j.cfg_.job_id, "' obeys coordinator epoch ",
                                         res.epoch(), ", newer than this coordinator's epoch ", j.cfg_.epoch,
                                         ": a newer coordinator drives the job; this one stops");
    if (j.resume_.fenced_hook) out->Call([hook = j.resume_.fenced_hook, why] { hook(why); });
    return absl::FailedPreconditionError(why);
  }
  const int64_t g = j.gen_->number();
  const int r = hello.rank();
  const bool member = r >= 0 && r < j.gen_->world_size() && j.gen_->rendezvous().member(r).joined;
  if (member && j.Running() && hello.generation() == g) {
    // Its stream broke, this coordinator went on (or was paused): it
    // attaches again and gets the plans it missed (Reattached).
    PSYNC_RETURN_IF_ERROR(j.gen_->Reattach(hello));
    j.events_.Append(v1::EVENT_JOINED, r, -1,
                     absl::StrCat(j.gen_->RankName(r), " re-attached after its Train stream broke"));
    return absl::OkStatus();
  }
  if (j.gen_->resumed() && j.Running() && hello.generation() == g) {
    PSYNC_RETURN_IF_ERROR(j.gen_->AddResumed(hello));
    if (j.gen_->plans().stop_scheduled() && !j.gen_->plans().regroup()) {
      j.state_ = v1::JOB_STOPPING;  // it held a stop plan the first rank had not received
      j.reason_ = j.gen_->plans().stop_reason();
    }
  } else if (j.state_ == v1::JOB_WAITING && g == j.resume_.restored_generation &&
             j.restarts_ == j.resume_.restored_restarts && !j.joins_.has_queued()) {
    // Why adopt: this coordinator has met no job but fresh Joins, and the
    // workers hold the one that runs; it goes on where they are, as that
    // generation. The Joins (a replacement for a rank lost meanwhile) wait
    // for the next one, which the lost rank's loss opens.
    PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<Generation> resumed,
                           Generation::Resumed(j.cfg_, hello, JobState::Clock::now()));
    j.joins_.QueueWaiting();
    j.gen_ = std::move(resumed);
    j.events_.SetGeneration(j.gen_->number());
    j.elastic_.Started(*j.gen_);
    j.state_ = j.gen_->plans().stop_scheduled() && !j.gen_->plans().regroup() ? v1::JOB_STOPPING : v1::JOB_RUNNING;
    j.reason_ = j.gen_->plans().stop_scheduled() ? j.gen_->plans().stop_reason() : std::string();
    j.events_.Append(v1::EVENT_COORDINATOR_RESTARTED, hello.rank(), j.gen_->plans().next_plan(),
                   absl::StrCat("coordinator restarted (epoch ", j.cfg_.epoch, "): generation ", j.gen_->number(), " of ",
                                j.gen_->world_size(), " ranks resumes at iteration ", j.gen_->plans().next_plan(),
                                " from its workers"));
    // Why unknown: without a journal this coordinator cannot tell how many
    // came before it, and a made-up 1 would be a lie (issue: say unknown).
    if (!j.resume_.journaled) j.resume_.coordinator_restarts = -1;
    AskPendingStop(j);
  } else if (hello.generation() >= g) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", hello.rank(), " resumes generation ", hello.generation(), " of job '", j.cfg_.job_id,
        "', but this coordinator formed generation ", g, " of its own meanwhile (",
        v1::JobState_Name(j.state_), "): the worker must exit and Join again"));
  }
  // Else an ended generation: Attach refuses it as any such stream.
  if (j.gen_->resumed() && hello.generation() == g) {
    j.events_.Append(v1::EVENT_JOINED, hello.rank(), -1,
                   absl::StrCat(j.gen_->RankName(hello.rank()), " re-attached (", j.gen_->resumed_ranks(), "/",
                                j.gen_->world_size(), ")"));
  }
  return absl::OkStatus();
}

void JobResume::SetFencedHook(JobState& j, std::function<void(const std::string& why)> hook) {
  std::lock_guard<std::mutex> l(j.mu_);
  j.resume_.fenced_hook = std::move(hook);
}

void JobResume::Reattached(JobState& j, const v1::Hello& hello, Outbox* out) {
  for (const PlanPtr& p : j.gen_->RecentPlansFrom(hello.resume().next_plan())) j.delivery_.SendTo(hello.rank(), p, out);
}

void JobResume::Ticked(JobState& j, JobState::Clock::time_point now, Outbox* out) {
  if (Fenced(j, out)) return;
  const JobState::Clock::time_point last = j.resume_.last_tick;
  j.resume_.last_tick = now;
  if (!j.resume_.held.empty() && now >= j.resume_.forgive_until && j.resume_.forgive_until != JobState::Clock::time_point{}) {
    // The ranks held for a re-attach that did not come: lost together.
    std::vector<int> gone;
    for (int r : j.resume_.held) {
      if (j.gen_->rank(r).state == v1::WORKER_TRAINING && !j.gen_->rank(r).attached) gone.push_back(r);
    }
    j.resume_.held.clear();
    const std::string why = absl::StrCat("Train stream broke while the coordinator was paused, and no re-attach within ",
                                         DurationText(j.cfg_.heartbeat_timeout));
    if (!gone.empty() && j.Running()) j.MarkRanksLostLocked(gone, why, out);
    if (!gone.empty() && !j.Running()) j.gen_->Ended(gone, false, why);
  }
  if (last == JobState::Clock::time_point{} || now - last <= j.cfg_.heartbeat_timeout || !j.Running()) return;
  // Why forgive: this coordinator did not run (SIGSTOP, a stalled host), so
  // the silence it saw is its own; and the workers' streams may have broken
  // meanwhile (their keepalive gave up), so they get to re-attach.
  j.resume_.forgive_until = now + j.cfg_.heartbeat_timeout;
  j.gen_->Forgive(now);
  j.events_.Append(v1::EVENT_COORDINATOR_PAUSED, -1, j.gen_->plans().next_plan(),
                   absl::StrCat("this coordinator did not run for ",
                                DurationText(std::chrono::duration_cast<std::chrono::milliseconds>(now - last)),
                                ": no rank's silence in it counts, and a rank whose stream broke may re-attach "
                                "within ", DurationText(j.cfg_.heartbeat_timeout)));
}

bool JobResume::HoldForReattach(JobState& j, const std::vector<int>& training) {
  const JobState::Clock::time_point now = JobState::Clock::now();
  const bool paused = now < j.resume_.forgive_until || (j.resume_.last_tick != JobState::Clock::time_point{} &&
                                                 now - j.resume_.last_tick > j.cfg_.heartbeat_timeout);
  if (!paused) return false;
  j.resume_.held.insert(j.resume_.held.end(), training.begin(), training.end());
  // Why hold: the stream broke because this coordinator did not run; the
  // worker rides through and re-attaches. Silence still loses it (the
  // heartbeat timeout, counted from the pause's end: Ticked).
  j.events_.Append(v1::EVENT_JOINED, training.front(), -1,
                   absl::StrCat(j.gen_->RankNames(training),
                                ": Train stream broke while this coordinator was paused; waiting for it to re-attach"));
  return true;
}

void JobResume::AskPendingStop(JobState& j) {
  if (j.resume_.pending_stop.empty()) return;
  const std::string why = std::exchange(j.resume_.pending_stop, std::string());
  PlanAggregator& plans = j.gen_->plans();
  // They hold a stop of their own (a plan carried it before the old
  // coordinator died); a regroup stop becomes the job's end.
  if (plans.stop_scheduled() && !plans.regroup()) return;
  j.state_ = v1::JOB_STOPPING;
  j.reason_ = why;
  plans.ScheduleStop(why);
  j.events_.Append(v1::EVENT_STOPPING, -1, plans.stop_after(),
                   absl::StrCat(why, " (asked of the coordinator before it restarted; kept in its --state-dir): "
                                "every rank stops after iteration ", plans.stop_after()));
}

}  // namespace psync::server
