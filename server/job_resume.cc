#include "server/job_resume.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "server/generation.h"

namespace psync::server {

absl::Status JobResume::Resume(JobState& j, const v1::Hello& hello, Outbox* out) {
  const v1::Resume& res = hello.resume();
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
    if (j.fenced_hook_) out->Call([hook = j.fenced_hook_, why] { hook(why); });
    return absl::FailedPreconditionError(why);
  }
  const int64_t g = j.gen_->number();
  if (j.gen_->resumed() && j.Running() && hello.generation() == g) {
    PSYNC_RETURN_IF_ERROR(j.gen_->AddResumed(hello));
    if (j.gen_->plans().stop_scheduled() && !j.gen_->plans().regroup()) {
      j.state_ = v1::JOB_STOPPING;  // it held a stop plan the first rank had not received
      j.reason_ = j.gen_->plans().stop_reason();
    }
  } else if (j.state_ == v1::JOB_WAITING && g == 1 && j.gen_->rendezvous().joined() == 0 && j.restarts_ == 0 &&
             !j.joins_.has_queued()) {
    // Why adopt: this coordinator has met no job, and the workers hold the
    // one that runs; it goes on where they are, as that generation.
    PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<Generation> resumed, Generation::Resumed(j.cfg_, hello, JobState::Clock::now()));
    j.gen_ = std::move(resumed);
    j.events_.SetGeneration(j.gen_->number());
    j.elastic_.Started(*j.gen_);
    j.state_ = j.gen_->plans().stop_scheduled() && !j.gen_->plans().regroup() ? v1::JOB_STOPPING : v1::JOB_RUNNING;
    j.reason_ = j.gen_->plans().stop_scheduled() ? j.gen_->plans().stop_reason() : std::string();
    j.events_.Append(v1::EVENT_COORDINATOR_RESTARTED, hello.rank(), j.gen_->plans().next_plan(),
                   absl::StrCat("coordinator restarted (epoch ", j.cfg_.epoch, "): generation ", j.gen_->number(), " of ",
                                j.gen_->world_size(), " ranks resumes at iteration ", j.gen_->plans().next_plan(),
                                " from its workers"));
  } else if (hello.generation() == g && j.Running()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", hello.rank(), " resumes generation ", g, ", which this coordinator runs and in which it lost rank ",
        hello.rank(), "'s stream: this worker must exit, and its replacement Join"));
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

}  // namespace psync::server
