#include "server/job_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/status_macros.h"
#include "server/job_resume.h"
#include "server/limits.h"
#include "server/liveness_policy.h"

namespace psync::server {

JobState::JobState(JobConfig config, Scheduler* scheduler, FlushRunner* flushes)
    : cfg_(ResolveJobConfig(std::move(config))),
      scheduler_(scheduler),
      start_time_(Clock::now()),
      joins_(scheduler, [this](uint64_t ticket) { ExpireJoin(ticket); }),
      delivery_(cfg_.world_size, cfg_.test_only_plan_delay, scheduler, flushes, [this] { DeliverDuePlans(); }),
      counters_(cfg_.world_size),
      gen_(std::make_unique<Generation>(cfg_, 1)),
      elastic_(cfg_, scheduler, [this](int64_t g) { RejoinDeadline(g); }) {}

void JobState::SetGenerationEndHook(std::function<void(const std::string&)> hook) {
  std::lock_guard<std::mutex> l(mu_);
  generation_end_hook_ = std::move(hook);
}

namespace {

// A Join once the job has ended (`state` FINISHED or ABORTED, for `reason`).
absl::Status JobEnded(v1::JobState state, const std::string& job_id, const std::string& reason) {
  if (state == v1::JOB_FINISHED) {
    return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "' has finished; start a new coordinator"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("job '", job_id, "' was aborted (", reason, "); start a new coordinator to run again"));
}

// `req` was refused with `refusal`. When it trains another job than the
// ranks waiting in `gen` (Rendezvous::CheckSameJob), they are refused too.
// Why: the world can never complete with ranks that train different jobs,
// and which side is wrong is the user's to say; so they learn it now, with
// both values, instead of after --join-timeout. They leave the rendezvous,
// so the next Join sets the reference anew. (Another start iteration is a
// race of checkpoints the waiting ranks are right to wait out.)
void RefuseWaitingJoins(PendingJoins& joins, Generation& gen, const v1::JoinRequest& req, const absl::Status& refusal,
                        Outbox* out) {
  if (gen.rendezvous().CheckSameJob(req).ok()) return;
  for (int r : joins.FailWaiting(gen.WorldCannotForm(refusal), out)) gen.RemoveMember(r);
}

// The ABORT plan at `iteration` for `reason` (for `ranks` only, when given:
// Plan.ranks). `rejoin` > 0: Plan.rejoin_generation (live recovery: stay
// and Join it).
PlanPtr AbortPlan(int64_t epoch, int64_t iteration, const std::string& reason, std::vector<int> ranks = {},
                  int64_t rejoin = 0) {
  auto plan = std::make_shared<v1::Plan>();
  plan->set_epoch(epoch);
  plan->set_iteration(iteration);
  plan->set_action(v1::ABORT);
  plan->set_reason(reason);
  plan->set_rejoin_generation(rejoin);
  for (int r : ranks) plan->add_ranks(r);
  return plan;
}

// A Train stream's hello must name this coordinator's job.
absl::Status CheckHelloJob(const v1::Hello& hello, const JobConfig& cfg) {
  if (hello.job_id() == cfg.job_id) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("job id '", hello.job_id().substr(0, 128),
                                                    "' does not match this coordinator's job '", cfg.job_id, "'"));
}

}  // namespace

// ---------------------------------------------------------------- rendezvous

uint64_t JobState::Join(const v1::JoinRequest& req, JoinDone done) {
  Outbox out;
  auto refuse = [&](absl::Status st) {
    PendingJoins::Answer(std::move(done), std::move(st), &out);
    return uint64_t{0};
  };
  if (absl::Status valid = CheckJoinRequest(req, cfg_); !valid.ok()) return refuse(valid);
  std::lock_guard<std::mutex> l(mu_);
  const int64_t g = gen_->number();
  switch (state_) {
    case v1::JOB_ABORTED:
    case v1::JOB_FINISHED:
      return refuse(JobEnded(state_, cfg_.job_id, reason_));
    case v1::JOB_RUNNING:
    case v1::JOB_STOPPING:
      if (CanQueueLocked()) {
        // Why: a restarted worker may be faster than the coordinator's
        // notice of the loss that ends this generation; it waits for the next.
        if (req.generation() != 0 && req.generation() != g + 1) {
          return refuse(absl::FailedPreconditionError(gen_->JoinRefusal(req.generation(), g + 1, restarts_)));
        }
        const uint64_t ticket = joins_.NewTicket();
        joins_.Queue(ticket, req, std::move(done), scheduler_->Now() + cfg_.join_timeout);
        // Why: a smaller world runs and a rank wants in (one came back); the
        // next generation takes it, from a checkpoint of this very stop (a
        // refusal here only means no regroup is due).
        (void)elastic_.ScheduleRegroup(state_, *gen_, AsksToJoin(req), events_, /*only_if_shrunk=*/true);
        return ticket;
      }
      return refuse(absl::ResourceExhaustedError(absl::StrCat(
          "world is full: all ", cfg_.world_size, " ranks of job '", cfg_.job_id, "' joined and it is running")));
    default:
      break;
  }
  if (req.generation() != 0 && req.generation() != g) {
    return refuse(absl::FailedPreconditionError(gen_->JoinRefusal(req.generation(), g, restarts_)));
  }
  return JoinWaitingLocked(req, std::move(done), joins_.NewTicket(), scheduler_->Now() + cfg_.join_timeout, &out);
}

uint64_t JobState::JoinWaitingLocked(const v1::JoinRequest& req, JoinDone done, uint64_t ticket,
                                     Clock::time_point deadline, Outbox* out) {
  absl::StatusOr<int> rank = gen_->AddMember(req);
  if (!rank.ok()) {
    RefuseWaitingJoins(joins_, *gen_, req, rank.status(), out);
    PendingJoins::Answer(std::move(done), rank.status(), out);
    return 0;
  }
  const int64_t g = gen_->number();
  // Elastic: generation 1's rejoin clock starts with its first Join (later
  // ones start theirs when they open).
  if (g == 1 && gen_->rendezvous().joined() == 1 && !elastic_.armed()) elastic_.Arm(g);
  events_.Append(v1::EVENT_JOINED, *rank, -1,
                 absl::StrCat(gen_->RankName(*rank), " joined (", gen_->rendezvous().joined(), "/",
                              cfg_.world_size, g > 1 ? absl::StrCat(", generation ", g) : std::string(), ")"));
  // Why: the Join is answered when the world completes; until then it only
  // holds a ticket (and a deadline on the scheduler), never a thread.
  joins_.Wait(ticket, *rank, req, std::move(done), deadline);
  if (gen_->rendezvous().complete()) {
    CompleteWorldLocked(out);
    return 0;
  }
  if (gen_->rejoin_passed()) MaybeStartSmallerWorldLocked(out);
  return state_ == v1::JOB_WAITING ? ticket : 0;
}

void JobState::ReplayQueuedJoinsLocked(Outbox* out) {
  // Why: Joins that arrived while the last generation ran join this one, in
  // arrival order, keeping their ticket and original deadline. Once the
  // world is complete, the rest stay queued (or are refused when no restart
  // is left).
  while (state_ == v1::JOB_WAITING) {
    std::optional<PendingJoins::Queued> q = joins_.TakeOldestQueued();
    if (!q) break;
    JoinWaitingLocked(q->req, std::move(q->done), q->ticket, q->deadline, out);
  }
  if (joins_.has_queued() && !CanQueueLocked()) {
    joins_.FailQueued(gen_->WorldFull(), out);
  }
}

void JobState::CompleteWorldLocked(Outbox* out) {
  // Why: all W ranks joined; training starts and every waiting Join is answered.
  state_ = v1::JOB_RUNNING;
  reason_.clear();
  elastic_.Started(*gen_);
  const Clock::time_point now = Clock::now();
  std::shared_ptr<const SharedJoinResponse> shared = gen_->Start(now);
  const std::string recovered =
      recoveries_.Formed(now, gen_->rendezvous().start_iteration(), gen_->rendezvous().live_members() > 0);
  events_.Append(v1::EVENT_WORLD_COMPLETE, -1, gen_->rendezvous().start_iteration(),
                 recovered.empty() ? gen_->StartText() : absl::StrCat(gen_->StartText(), "; ", recovered));
  joins_.AnswerWaiting(std::move(shared), out);
}

void JobState::ExpireJoin(uint64_t ticket) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (std::optional<PendingJoins::Waiting> w = joins_.TakeWaiting(ticket)) {
    absl::Status incomplete = gen_->WorldIncomplete();
    // Why: the world did not complete in time; the rank is free again.
    gen_->RemoveMember(w->rank);
    PendingJoins::Answer(std::move(w->done), std::move(incomplete), &out);
  } else if (std::optional<PendingJoins::Queued> q = joins_.TakeQueued(ticket)) {
    PendingJoins::Answer(std::move(q->done), gen_->QueuedJoinExpired(), &out);
  }
}

void JobState::CancelJoin(uint64_t ticket) {
  if (ticket == 0) return;
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (std::optional<PendingJoins::Queued> q = joins_.TakeQueued(ticket)) {
    PendingJoins::Answer(std::move(q->done),
                         absl::CancelledError("join for the next generation cancelled by the worker"), &out);
    return;
  }
  std::optional<PendingJoins::Waiting> w = joins_.TakeWaiting(ticket);
  if (!w) return;
  // Why: the worker gave up waiting (its RPC was cancelled); free its rank.
  gen_->RemoveMember(w->rank);
  PendingJoins::Answer(std::move(w->done),
                       absl::CancelledError(absl::StrCat("join of rank ", w->rank, " cancelled by the worker")), &out);
}

// ---------------------------------------------------------------- train streams

absl::StatusOr<StreamRef> JobState::Attach(const v1::Hello& hello, std::shared_ptr<PlanSink> sink) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  PSYNC_RETURN_IF_ERROR(CheckHelloJob(hello, cfg_));
  if (hello.has_resume()) PSYNC_RETURN_IF_ERROR(JobResume::Resume(*this, hello, &out));
  PSYNC_ASSIGN_OR_RETURN(const std::vector<int> ranks, HelloRanks(hello, gen_->world_size()));
  PSYNC_RETURN_IF_ERROR(gen_->CheckStreamGeneration(ranks.front(), hello.generation()));
  if (state_ == v1::JOB_ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", reason_));
  if (state_ == v1::JOB_FINISHED) return absl::FailedPreconditionError("job has finished");
  const bool host = hello.ranks_size() > 0;
  PSYNC_RETURN_IF_ERROR(gen_->CheckAttachable(ranks, host));
  // Why: from now on these ranks' plans go to this stream (each plan once),
  // and each rank must be heard on it.
  gen_->Attach(ranks, sink.get(), Clock::now());
  const StreamRef ref{sink.get(), gen_->number(), host ? -1 : ranks.front()};
  delivery_.Bind(ranks, std::move(sink));
  if (hello.has_resume()) JobResume::Reattached(*this, hello, &out);
  return ref;
}

absl::Status JobState::Report(const StreamRef& stream, const v1::Report& report) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  return ReportsLocked(stream, {&report}, "report", &out);
}

absl::Status JobState::ReportBatch(const StreamRef& stream, const v1::ReportBatch& batch) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  PSYNC_RETURN_IF_ERROR(CheckHostStream(stream, "report_batch"));
  if (batch.reports_size() == 0) return absl::InvalidArgumentError("report_batch holds no report");
  if (batch.reports_size() > gen_->world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("report_batch holds ", batch.reports_size(),
                                                   " reports but the world has ", gen_->world_size(), " ranks"));
  }
  std::vector<const v1::Report*> reports;
  for (const v1::Report& r : batch.reports()) reports.push_back(&r);
  return ReportsLocked(stream, reports, "report_batch report", &out);
}

absl::Status JobState::ReportsLocked(const StreamRef& stream, const std::vector<const v1::Report*>& reports,
                                     const char* what, Outbox* out) {
  if (state_ == v1::JOB_ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", reason_));
  std::vector<int> senders;
  for (const v1::Report* r : reports) {  // first: a batch naming a stranger changes nothing
    PSYNC_ASSIGN_OR_RETURN(const int rank, gen_->Sender(stream, r->rank(), what));
    senders.push_back(rank);
  }
  // Why one lock for a batch: the point of a host stream is that the
  // coordinator handles a host's reports of an iteration as one message,
  // and the plans they complete go out once, after the last of them.
  for (size_t i = 0; i < reports.size(); ++i) {
    PSYNC_RETURN_IF_ERROR(gen_->Report(senders[i], *reports[i], Clock::now()));
    counters_.Reported(senders[i]);
    if (std::string why = gen_->StepsMismatchAfterReport(senders[i]); !why.empty()) {
      AbortLocked(why, out);
      return absl::OkStatus();  // the report ended the job; the rest are moot
    }
  }
  EmitReadyPlansLocked(out);
  return absl::OkStatus();
}

absl::Status JobState::Done(const StreamRef& stream, const v1::Done& done) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  PSYNC_ASSIGN_OR_RETURN(const int rank, gen_->Sender(stream, done.rank(), "done"));
  return DoneLocked(rank, done, &out);
}

absl::Status JobState::DoneLocked(int rank, const v1::Done& done, Outbox* out) {
  const RankRuntime& m = gen_->rank(rank);
  if (m.state != v1::WORKER_TRAINING) {
    return absl::FailedPreconditionError(
        absl::StrCat("Done from rank ", rank, " which is ", v1::WorkerState_Name(m.state)));
  }
  const std::string reason = done.exit_reason().substr(0, kMaxStringBytes);
  if (done.exit_code() != 0) {
    const std::string failed = absl::StrCat("failed (exit code ", done.exit_code(), ")");
    // Why not DONE once the job ended: it did not finish (e.g. the
    // coordinator was paused, the rank gave up on it and exited 5, and
    // another rank's loss aborted the job first).
    if (Running()) {
      MarkRanksLostLocked({rank}, absl::StrCat(failed, ": ", reason), out);
    } else {
      gen_->Ended({rank}, false, absl::StrCat(failed, " after the job ended: ", reason));
    }
    return absl::OkStatus();
  }
  // Why: the rank finished cleanly; its stream gets no more plans for it (a
  // host stream goes on for its other ranks).
  gen_->Done(rank, reason);
  delivery_.Release(rank);
  events_.Append(v1::EVENT_DONE, rank, m.last_iteration, absl::StrCat(gen_->RankName(rank), " done: ", reason));
  if (std::string why = gen_->StepsMismatchAfterDone(rank); !why.empty() && state_ != v1::JOB_ABORTED) {
    AbortLocked(why, out);
    return absl::OkStatus();
  }
  MaybeFinishLocked(out);
  return absl::OkStatus();
}

absl::Status JobState::Heartbeat(const StreamRef& stream, const v1::Heartbeat& hb, Clock::time_point now) {
  std::lock_guard<std::mutex> l(mu_);
  PSYNC_ASSIGN_OR_RETURN(const int rank, gen_->Sender(stream, hb.rank(), "heartbeat"));
  if (hb.rank() != rank) {  // a rank's own stream: heartbeats name their rank too
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat names rank ", hb.rank(), " on the Train stream of rank ", rank));
  }
  gen_->Heard(rank, hb.iteration(), now);
  return absl::OkStatus();
}

absl::Status JobState::RankClosed(const StreamRef& stream, const v1::RankClosed& closed) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  PSYNC_RETURN_IF_ERROR(CheckHostStream(stream, "rank_closed"));
  PSYNC_ASSIGN_OR_RETURN(const int rank, gen_->Sender(stream, closed.rank(), "rank_closed"));
  DisconnectLocked(gen_->Detach(stream, rank),
                   closed.cause().empty() ? std::string("stream closed") : closed.cause().substr(0, kMaxStringBytes),
                   &out);
  return absl::OkStatus();
}

void JobState::StreamClosed(const StreamRef& stream, const std::string& cause) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  // An ended generation's stream: its ranks are gone already.
  if (stream.generation != gen_->number() || stream.sink == nullptr) return;
  DisconnectLocked(gen_->Detach(stream), cause, &out);
}

void JobState::DisconnectLocked(const std::vector<int>& ranks, const std::string& cause, Outbox* out) {
  for (int r : ranks) delivery_.Release(r);
  std::vector<int> training;
  for (int r : ranks) {
    if (gen_->rank(r).state == v1::WORKER_TRAINING) training.push_back(r);  // else Done, or lost
  }
  if (training.empty()) return;
  if (state_ == v1::JOB_ABORTED || state_ == v1::JOB_FINISHED) {
    // Not DONE after an abort: those ranks did not finish (they exit 4, or
    // 5 if they gave up on the coordinator first).
    const bool aborted = state_ == v1::JOB_ABORTED;
    gen_->Ended(training, !aborted, absl::StrCat(aborted ? "disconnected without Done after the job was aborted: "
                                                         : "disconnected after the job ended: ", cause));
    return;
  }
  if (gen_->plans().StopPlanSent()) {
    // Why: the stop plan is out, so these ranks had nothing left to do.
    gen_->Ended(training, true, absl::StrCat("disconnected after the stop plan: ", cause));
    MaybeFinishLocked(out);
    return;
  }
  if (JobResume::HoldForReattach(*this, training)) return;
  MarkRanksLostLocked(training, cause, out);
}

// ---------------------------------------------------------------- plans and endings

void JobState::EmitReadyPlansLocked(Outbox* out) {
  PlanAggregator& plans = gen_->plans();
  if (plans.Ready() && JobResume::Fenced(*this, out)) return;  // a newer coordinator drives the job
  while (plans.Ready()) {
    const Clock::time_point now = Clock::now();
    counters_.PlanEmitted(plans.PendingArrivals(), now);
    auto plan = std::make_shared<const v1::Plan>(plans.Emit());
    gen_->PlanEmitted(now);
    gen_->Remember(plan);
    if (plan->has_bucket_plan()) {
      const v1::BucketPlan& bp = plan->bucket_plan();
      events_.Append(v1::EVENT_PLAN_APPLIED, -1, bp.applies_from_iteration(),
                     absl::StrCat("bucket plan ", bp.id(), " (", bp.buckets_size(),
                                  " buckets, from rank 0's ready order) applies from iteration ",
                                  bp.applies_from_iteration()));
    }
    delivery_.Broadcast(std::move(plan), out);
  }
}

void JobState::DeliverDuePlans() {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  delivery_.DeliverDue(&out);
}


void JobState::AbortLocked(const std::string& reason, Outbox* out) {
  if (state_ == v1::JOB_ABORTED || state_ == v1::JOB_FINISHED) return;
  // Why: a rank was lost (or the coordinator is going away); nobody can
  // finish the job, so every rank stops now and later Joins are refused.
  state_ = v1::JOB_ABORTED;
  reason_ = reason;
  joins_.FailQueued(absl::FailedPreconditionError(absl::StrCat("job '", cfg_.job_id, "' was aborted (", reason, ")")),
                    out);
  delivery_.BroadcastNow(AbortPlan(cfg_.epoch, gen_->plans().next_plan(), reason), out);  // never held back
  delivery_.ReleaseAll();
  joins_.FailWaiting(
      absl::FailedPreconditionError(absl::StrCat("job '", cfg_.job_id, "' ended during rendezvous: ", reason)), out);
  events_.Append(v1::EVENT_ABORTED, -1, gen_->plans().next_plan(), absl::StrCat("job aborted: ", reason));
}

void JobState::MarkRanksLostLocked(const std::vector<int>& candidates, const std::string& why, Outbox* out) {
  std::vector<int> lost;
  for (int rank : candidates) {
    const v1::WorkerState s = gen_->rank(rank).state;
    if (s != v1::WORKER_LOST && s != v1::WORKER_DONE) lost.push_back(rank);
  }
  if (lost.empty()) return;
  const std::string msg = absl::StrCat(gen_->RankNames(lost), " lost: ", why);
  const bool restartable = cfg_.max_restarts > 0;
  const int64_t g = gen_->number();
  for (int rank : lost) {
    RankRuntime& m = gen_->rank(rank);
    m.state = v1::WORKER_LOST;
    m.exit_reason = msg;
    counters_.Lost(rank);
    if (delivery_.bound(rank)) {
      // Tell the rank itself too, in case its stream still works (e.g. it was
      // blamed for a missing report): it stops instead of waiting. Plan.ranks
      // names it, so a host stream passes this one to it alone.
      delivery_.SendTo(
          rank, AbortPlan(cfg_.epoch, gen_->plans().next_plan(), absl::StrCat("this rank was declared lost: ", msg), {rank}), out);
      delivery_.Release(rank);
    }
    events_.Append(v1::EVENT_LOST, rank, gen_->plans().next_plan(),
                   restartable ? absl::StrCat(msg, " (generation ", g, ")") : msg);
  }
  if (CanRestartLocked()) {
    RestartLocked(lost.front(), msg, out);
    return;
  }
  AbortLocked(restartable && state_ == v1::JOB_RUNNING
                  ? absl::StrCat(msg, " (generation ", g, "; all ", cfg_.max_restarts, " restarts used)")
                  : msg,
              out);
}

void JobState::RestartLocked(int lost_rank, const std::string& why, Outbox* out) {
  // Why: restartable mode and restarts left: this generation cannot go on
  // without the lost rank, but the job can, once the whole world rejoins
  // (from a checkpoint) as the next generation.
  const int64_t ended = gen_->number();
  ++restarts_;
  recoveries_.Lost(Clock::now(), gen_->FurthestReported());
  // Why the survivors may stay (live): each holds the state of the last
  // step it completed, and the next generation starts from the newest of
  // those, healing whoever lacks it; no process restarts, no file is read.
  const bool live = cfg_.recovery == JobConfig::Recovery::kLive;
  const std::string ask = RestartAsk(cfg_, restarts_, ended + 1);
  delivery_.BroadcastNow(
      AbortPlan(cfg_.epoch, gen_->plans().next_plan(), absl::StrCat("generation ", ended, " aborted: ", why, "; ", ask), {},
                live ? ended + 1 : 0),
      out);  // never held back
  delivery_.ReleaseAll();
  events_.Append(v1::EVENT_RESTARTING, lost_rank, gen_->plans().next_plan(),
                 absl::StrCat("generation ", ended, " aborted (", why, "); ", ask));
  OpenNextGenerationLocked(absl::StrCat("generation ", ended, ": ", why),
                           absl::StrCat("restart ", restarts_, " of ", cfg_.max_restarts, "; generation ", ended,
                                        " aborted: ", why),
                           out);
}

void JobState::OpenNextGenerationLocked(const std::string& previous_end, const std::string& why, Outbox* out) {
  const int64_t ended = gen_->number();
  if (generation_end_hook_) {
    out->Call([hook = generation_end_hook_, prefix = gen_->store_prefix()] { hook(prefix); });
  }
  // The next generation: everything per generation starts afresh, but for
  // the job's bucket layout (PlanAggregator::CarryBucketPlan says why).
  const v1::BucketPlan layout = gen_->plans().job_bucket_plan();
  gen_ = std::make_unique<Generation>(cfg_, ended + 1, previous_end);
  gen_->plans().CarryBucketPlan(layout);
  events_.SetGeneration(ended + 1);
  reason_ = absl::StrCat("waiting for ", cfg_.world_size, " ranks to Join generation ", ended + 1, " (", why, ")",
                         elastic_.WaitingNote());
  elastic_.Arm(ended + 1);
  state_ = v1::JOB_WAITING;
  ReplayQueuedJoinsLocked(out);
}

void JobState::RejoinDeadline(int64_t generation) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (gen_->number() != generation || state_ != v1::JOB_WAITING) return;
  // Why: the ranks that are missing now had --rejoin-timeout to come back;
  // from here the generation may start without them (and does once it may).
  gen_->set_rejoin_passed();
  MaybeStartSmallerWorldLocked(&out);
}

void JobState::MaybeStartSmallerWorldLocked(Outbox* out) {
  if (std::string why = elastic_.WhyWait(*gen_); !why.empty()) {
    reason_ = std::move(why);
    return;
  }
  std::vector<int> old_ranks;
  std::string event;
  std::unique_ptr<Generation> smaller = elastic_.Shrink(*gen_, &old_ranks, &event);
  // Why renumber: ranks are 0..n-1 in every world; the ones that joined
  // keep their order. Their waiting Joins learn the new numbers.
  joins_.RenumberWaiting(old_ranks);
  gen_ = std::move(smaller);
  events_.Append(v1::EVENT_REGROUPED, -1, -1, event);
  CompleteWorldLocked(out);
}

absl::StatusOr<int64_t> JobState::Regroup(const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  PSYNC_RETURN_IF_ERROR(elastic_.ScheduleRegroup(state_, *gen_, reason.substr(0, kMaxStringBytes), events_));
  return gen_->plans().stop_after();
}

void JobState::MaybeFinishLocked(Outbox* out) {
  if (!Running()) return;
  for (int r = 0; r < gen_->world_size(); ++r) {
    if (gen_->rank(r).state != v1::WORKER_DONE) return;
  }
  if (state_ == v1::JOB_RUNNING && gen_->plans().regroup()) {
    // Why: every rank stopped at the regroup's iteration with its
    // checkpoint written; the job goes on with whoever joins now.
    const std::string why = ElasticWorld::RegroupEnded(*gen_);
    events_.Append(v1::EVENT_REGROUPED, -1, gen_->plans().last_plan(), why);
    OpenNextGenerationLocked(why, why, out);
    return;
  }
  // Why: every rank is done; nothing more can happen in this job.
  state_ = v1::JOB_FINISHED;
  joins_.FailQueued(
      absl::FailedPreconditionError(absl::StrCat("job '", cfg_.job_id, "' has finished; start a new coordinator")),
      out);
  const int64_t last = gen_->plans().last_plan();
  events_.Append(v1::EVENT_FINISHED, -1, last, absl::StrCat("job finished after iteration ", last));
}

void JobState::CheckLiveness(Clock::time_point now, bool ticker) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (ticker) JobResume::Ticked(*this, now, &out);
  if (!Running()) return;
  if (gen_->plans().StopPlanSent()) return;  // ranks are finishing; nothing more is expected
  if (std::optional<LostVerdict> lost = gen_->LostRank(now)) MarkRanksLostLocked({lost->rank}, lost->why, &out);
}

v1::ShutdownResponse JobState::Shutdown(const std::string& reason) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  v1::ShutdownResponse resp;
  const std::string why = reason.empty() ? "shutdown requested" : reason.substr(0, kMaxStringBytes);
  PlanAggregator& plans = gen_->plans();
  switch (state_) {
    case v1::JOB_WAITING:
      // Why: nobody trains yet; the job ends now and the waiting Joins hear why.
      state_ = v1::JOB_FINISHED;
      reason_ = absl::StrCat(why, " before the world was complete");
      events_.Append(v1::EVENT_FINISHED, -1, -1, reason_);
      joins_.FailWaiting(
          absl::FailedPreconditionError(absl::StrCat("job '", cfg_.job_id, "' ended during rendezvous: ", reason_)),
          &out);
      resp.set_stop_after_iteration(-1);
      break;
    case v1::JOB_RUNNING: {
      // Why: stop every rank after the same iteration (plan_aggregator.h).
      state_ = v1::JOB_STOPPING;
      reason_ = why;
      joins_.FailQueued(absl::FailedPreconditionError(absl::StrCat("job '", cfg_.job_id, "' is stopping (", why,
                                                                   "): no next generation will form")),
                        &out);
      plans.ScheduleStop(why);
      const int64_t stop = plans.stop_after();
      resp.set_stop_after_iteration(stop);
      events_.Append(v1::EVENT_STOPPING, -1, stop,
                     absl::StrCat(why, ": every rank stops after iteration ", stop,
                                  plans.started() ? "" : " (counted from the first iteration)"));
      break;
    }
    default:
      resp.set_already_stopping(state_ == v1::JOB_STOPPING);
      resp.set_stop_after_iteration(plans.stop_scheduled() ? plans.stop_after() : -1);
      break;
  }
  resp.set_state(state_);
  return resp;
}

void JobState::Abort(const std::string& reason) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  AbortLocked(reason, &out);
}

v1::JobState JobState::state() const {
  std::lock_guard<std::mutex> l(mu_);
  return state_;
}

int64_t JobState::generation() const {
  std::lock_guard<std::mutex> l(mu_);
  return gen_->number();
}

int JobState::restarts() const {
  std::lock_guard<std::mutex> l(mu_);
  return restarts_;
}

bool JobState::Ended() const {
  std::lock_guard<std::mutex> l(mu_);
  return state_ == v1::JOB_FINISHED || state_ == v1::JOB_ABORTED;
}

}  // namespace psync::server
