#include "server/job_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/limits.h"
#include "server/liveness_policy.h"

namespace psync::server {
namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Unique per job generation (and per coordinator start, so a restarted
// coordinator's keys never meet an old worker's).
std::string StorePrefix(const std::string& job_id, int64_t generation) {
  return absl::StrCat(job_id, "/g", generation, "-",
                      std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count(),
                      "/");
}

JobConfig Resolve(JobConfig c) {
  c.heartbeat_timeout = EffectiveHeartbeatTimeout(c);
  c.plan_lookahead = std::clamp(c.plan_lookahead, 1, kMaxPlanLookahead);
  c.max_restarts = std::clamp(c.max_restarts, 0, kMaxRestarts);
  return c;
}

}  // namespace

std::chrono::milliseconds EffectiveHeartbeatTimeout(const JobConfig& cfg) {
  if (cfg.heartbeat_timeout.count() > 0) return cfg.heartbeat_timeout;
  return std::max(std::chrono::milliseconds(1),
                  std::min(std::chrono::milliseconds(5000), cfg.report_timeout / 2));
}

std::chrono::milliseconds HeartbeatInterval(const JobConfig& cfg) {
  const auto quarter = EffectiveHeartbeatTimeout(cfg) / 4;
  return std::clamp(quarter, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

JobState::JobState(JobConfig config, Scheduler* scheduler, FlushRunner* flushes)
    : cfg_(Resolve(std::move(config))),
      scheduler_(scheduler),
      flush_runner_(flushes),
      start_time_(Clock::now()),
      store_prefix_(StorePrefix(cfg_.job_id, 1)),
      rendezvous_(cfg_.world_size),
      plans_(cfg_.world_size, cfg_.plan_lookahead),
      ranks_(static_cast<size_t>(cfg_.world_size)) {}

void JobState::SetGenerationEndHook(std::function<void(const std::string&)> hook) {
  std::lock_guard<std::mutex> l(mu_);
  generation_end_hook_ = std::move(hook);
}

// ---------------------------------------------------------------- rendezvous

uint64_t JobState::Join(const v1::JoinRequest& req, JoinDone done) {
  Outbox out;
  auto refuse = [&](absl::Status st) {
    out.calls.push_back([done = std::move(done), st = std::move(st)] { done(st); });
    return uint64_t{0};
  };
  if (absl::Status valid = ValidateJoinRequest(req); !valid.ok()) return refuse(valid);
  if (req.job_id() != cfg_.job_id) {
    return refuse(absl::FailedPreconditionError(absl::StrCat(
        "job id '", req.job_id(), "' does not match this coordinator's job '", cfg_.job_id, "': check --job-id")));
  }
  if (req.world_size() != 0 && req.world_size() != cfg_.world_size) {
    return refuse(absl::FailedPreconditionError(
        absl::StrCat("worker expects world size ", req.world_size(), " but the coordinator's job '",
                     cfg_.job_id, "' has world size ", cfg_.world_size)));
  }
  std::lock_guard<std::mutex> l(mu_);
  switch (state_) {
    case v1::JOB_ABORTED:
      return refuse(absl::FailedPreconditionError(absl::StrCat(
          "job '", cfg_.job_id, "' was aborted (", reason_, "); start a new coordinator to run again")));
    case v1::JOB_FINISHED:
      return refuse(absl::FailedPreconditionError(
          absl::StrCat("job '", cfg_.job_id, "' has finished; start a new coordinator")));
    case v1::JOB_RUNNING:
    case v1::JOB_STOPPING:
      if (CanRestartLocked()) {
        // Why: a restarted worker may be faster than the coordinator's
        // notice of the loss that ends this generation; it waits for the next.
        if (req.generation() != 0 && req.generation() != generation_ + 1) {
          return refuse(absl::FailedPreconditionError(GenerationRefusalLocked(req.generation(), generation_ + 1)));
        }
        return QueueForNextGenerationLocked(req, std::move(done));
      }
      return refuse(absl::ResourceExhaustedError(absl::StrCat(
          "world is full: all ", cfg_.world_size, " ranks of job '", cfg_.job_id, "' joined and it is running")));
    default:
      break;
  }
  if (req.generation() != 0 && req.generation() != generation_) {
    return refuse(absl::FailedPreconditionError(GenerationRefusalLocked(req.generation(), generation_)));
  }
  const uint64_t ticket = next_ticket_++;
  return JoinWaitingLocked(req, std::move(done), ticket, scheduler_->Now() + cfg_.join_timeout, &out);
}

uint64_t JobState::JoinWaitingLocked(const v1::JoinRequest& req, JoinDone done, uint64_t ticket,
                                     Clock::time_point deadline, Outbox* out) {
  absl::StatusOr<int> rank = rendezvous_.PickRank(req);
  if (!rank.ok()) {
    out->calls.push_back([done = std::move(done), st = rank.status()] { done(st); });
    return 0;
  }
  const bool first = !rendezvous_.has_reference();
  rendezvous_.Add(*rank, req);
  if (first) {
    plans_.SetModel(rendezvous_.param_bytes(), rendezvous_.first_bucket_cap(), rendezvous_.bucket_cap());
  }
  ranks_[static_cast<size_t>(*rank)] = RankRuntime{};
  ranks_[static_cast<size_t>(*rank)].state = v1::WORKER_JOINED;
  events_.Append(v1::EVENT_JOINED, *rank, -1,
                 absl::StrCat(RankName(*rank), " joined (", rendezvous_.joined(), "/", cfg_.world_size,
                              generation_ > 1 ? absl::StrCat(", generation ", generation_) : std::string(), ")"));
  // Why: the Join is answered when the world completes; until then it only
  // holds a ticket (and a deadline on the scheduler), never a thread.
  Rendezvous::Waiter w;
  w.rank = *rank;
  w.done = std::move(done);
  w.timer = scheduler_->RunAt(deadline, [this, ticket] { ExpireJoin(ticket); });
  rendezvous_.AddWaiter(ticket, std::move(w));
  if (rendezvous_.complete()) {
    CompleteWorldLocked(out);
    return 0;
  }
  return ticket;
}

std::string JobState::GenerationRefusalLocked(int64_t asked, int64_t joinable) const {
  const std::string head = absl::StrCat("this worker asks to join generation ", asked, " of job '", cfg_.job_id, "'");
  if (asked < generation_) {
    return absl::StrCat(head, ", which has ended (",
                        last_restart_reason_.empty() ? "restarted" : last_restart_reason_,
                        "); the job is at generation ", generation_,
                        ": the worker belongs to an old generation; restart it (JoinRequest.generation 0 joins the "
                        "one being formed)");
  }
  if (asked == generation_) {
    return absl::StrCat(head, ", which is complete and running; a new worker can only join generation ", joinable);
  }
  return absl::StrCat(head, ", but the next one to form is generation ", joinable, " (", restarts_, " of ",
                      cfg_.max_restarts, " restarts used)");
}

uint64_t JobState::QueueForNextGenerationLocked(const v1::JoinRequest& req, JoinDone done) {
  const uint64_t ticket = next_ticket_++;
  QueuedJoin q;
  q.req = req;
  q.done = std::move(done);
  q.deadline = scheduler_->Now() + cfg_.join_timeout;
  q.timer = scheduler_->RunAt(q.deadline, [this, ticket] { ExpireQueuedJoin(ticket); });
  next_generation_joins_.emplace(ticket, std::move(q));
  return ticket;
}

void JobState::ExpireQueuedJoin(uint64_t ticket) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  auto it = next_generation_joins_.find(ticket);
  if (it == next_generation_joins_.end()) return;
  out.calls.push_back(
      [done = std::move(it->second.done),
       st = absl::DeadlineExceededError(absl::StrCat(
           "generation ", generation_, " of job '", cfg_.job_id, "' still runs after ",
           DurationText(cfg_.join_timeout), ": this Join waited for generation ", generation_ + 1,
           ", which forms only once a rank of generation ", generation_,
           " is lost (is this worker extra, or is its rank still running?)"))] { done(st); });
  next_generation_joins_.erase(it);
}

void JobState::FailQueuedJoinsLocked(const std::string& why, Outbox* out) {
  for (auto& [ticket, q] : next_generation_joins_) {
    scheduler_->Cancel(q.timer);
    out->calls.push_back([done = std::move(q.done), st = absl::FailedPreconditionError(why)] { done(st); });
  }
  next_generation_joins_.clear();
}

void JobState::ReplayQueuedJoinsLocked(Outbox* out) {
  // Why: Joins that arrived while the last generation ran join this one, in
  // arrival order, keeping their original deadline. Once the world is
  // complete, the rest stay queued (or are refused when no restart is left).
  while (!next_generation_joins_.empty() && state_ == v1::JOB_WAITING) {
    auto it = next_generation_joins_.begin();
    const uint64_t ticket = it->first;
    QueuedJoin q = std::move(it->second);
    next_generation_joins_.erase(it);
    scheduler_->Cancel(q.timer);
    JoinWaitingLocked(q.req, std::move(q.done), ticket, q.deadline, out);
  }
  if (!next_generation_joins_.empty() && !CanRestartLocked()) {
    FailQueuedJoinsLocked(absl::StrCat("world is full: all ", cfg_.world_size, " ranks of job '", cfg_.job_id,
                                       "' joined generation ", generation_, " and it is running"),
                          out);
  }
}

std::shared_ptr<const SharedJoinResponse> JobState::MakeSharedJoinResponse() const {
  auto shared = std::make_shared<SharedJoinResponse>();
  v1::JoinResponse& resp = shared->response;
  resp.set_world_size(cfg_.world_size);
  resp.set_generation(generation_);
  resp.set_store_prefix(store_prefix_);
  *resp.mutable_initial_bucket_plan() = plans_.current_bucket_plan();
  resp.set_job_id(cfg_.job_id);
  resp.set_heartbeat_interval_ms(HeartbeatInterval(cfg_).count());
  resp.set_plan_lookahead(cfg_.plan_lookahead);
  resp.set_start_iteration(rendezvous_.start_iteration());
  rendezvous_.FillHosts(&resp);
  shared->bytes = resp.SerializeAsString();
  return shared;
}

void JobState::CompleteWorldLocked(Outbox* out) {
  // Why: all W ranks joined; training starts and every waiting Join is answered.
  state_ = v1::JOB_RUNNING;
  reason_.clear();
  world_complete_time_ = Clock::now();
  // Why: every rank agreed on the start iteration (a resumed generation
  // starts at its checkpoint's step); the plan window opens there.
  plans_.Start(rendezvous_.start_iteration());
  events_.Append(v1::EVENT_WORLD_COMPLETE, -1, rendezvous_.start_iteration(),
                 absl::StrCat("world complete: ", cfg_.world_size, " ranks",
                              generation_ > 1 || rendezvous_.start_iteration() > 0
                                  ? absl::StrCat(" (generation ", generation_, ", from iteration ",
                                                 rendezvous_.start_iteration(), ")")
                                  : std::string()));
  std::shared_ptr<const SharedJoinResponse> shared = MakeSharedJoinResponse();
  std::vector<Rendezvous::Waiter> waiters = rendezvous_.TakeAllWaiters();
  for (const Rendezvous::Waiter& w : waiters) scheduler_->Cancel(w.timer);
  // One call for all: answering thousands of Joins is one loop after unlocking.
  out->calls.push_back([waiters = std::move(waiters), shared]() mutable {
    for (Rendezvous::Waiter& w : waiters) w.done(JoinAnswer{w.rank, shared});
  });
}

void JobState::FailWaitersLocked(const std::string& why, Outbox* out) {
  for (Rendezvous::Waiter& w : rendezvous_.TakeAllWaiters()) {
    scheduler_->Cancel(w.timer);
    out->calls.push_back([done = std::move(w.done), st = absl::FailedPreconditionError(why)] { done(st); });
  }
}

void JobState::ExpireJoin(uint64_t ticket) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  Rendezvous::Waiter w;
  if (!rendezvous_.TakeWaiter(ticket, &w)) return;
  const std::vector<int> missing = rendezvous_.MissingRanks(16);
  const int present = rendezvous_.joined();
  // Why: the world did not complete in time; the rank is free again.
  rendezvous_.Remove(w.rank);
  ranks_[static_cast<size_t>(w.rank)] = RankRuntime{};
  out.calls.push_back([done = std::move(w.done),
                       st = absl::DeadlineExceededError(absl::StrCat(
                           "world incomplete after ", DurationText(cfg_.join_timeout), ": ", present, " of ",
                           cfg_.world_size, " ranks joined; still missing ranks ", absl::StrJoin(missing, ","),
                           " (start the remaining workers, or raise --join-timeout)"))] { done(st); });
}

void JobState::CancelJoin(uint64_t ticket) {
  if (ticket == 0) return;
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = next_generation_joins_.find(ticket); it != next_generation_joins_.end()) {
    scheduler_->Cancel(it->second.timer);
    out.calls.push_back([done = std::move(it->second.done),
                         st = absl::CancelledError("join for the next generation cancelled by the worker")] {
      done(st);
    });
    next_generation_joins_.erase(it);
    return;
  }
  Rendezvous::Waiter w;
  if (!rendezvous_.TakeWaiter(ticket, &w)) return;
  scheduler_->Cancel(w.timer);
  // Why: the worker gave up waiting (its RPC was cancelled); free its rank.
  rendezvous_.Remove(w.rank);
  ranks_[static_cast<size_t>(w.rank)] = RankRuntime{};
  out.calls.push_back([done = std::move(w.done), st = absl::CancelledError(absl::StrCat(
                                                     "join of rank ", w.rank, " cancelled by the worker"))] {
    done(st);
  });
}

// ---------------------------------------------------------------- train stream

absl::Status JobState::Attach(const v1::Hello& hello, std::shared_ptr<PlanSink> sink) {
  std::lock_guard<std::mutex> l(mu_);
  if (hello.job_id() != cfg_.job_id) {
    return absl::FailedPreconditionError(absl::StrCat("job id '", hello.job_id().substr(0, 128),
                                                      "' does not match this coordinator's job '", cfg_.job_id, "'"));
  }
  if (hello.ranks_size() > 0) return AttachHostLocked(hello, std::move(sink));
  const int rank = hello.rank();
  if (rank < 0 || rank >= cfg_.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello.rank ", rank, " is out of range for world size ", cfg_.world_size));
  }
  if (hello.generation() != generation_) {
    if (hello.generation() > 0 && hello.generation() < generation_) {
      return CheckStreamGenerationLocked(rank, hello.generation());
    }
    return absl::FailedPreconditionError(absl::StrCat("hello.generation ", hello.generation(),
                                                      " is not the job's generation ", generation_, ": Join again"));
  }
  if (state_ == v1::JOB_ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", reason_));
  if (state_ == v1::JOB_FINISHED) return absl::FailedPreconditionError("job has finished");
  RankRuntime& m = ranks_[static_cast<size_t>(rank)];
  if (state_ == v1::JOB_WAITING || !rendezvous_.member(rank).joined) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " has not completed Join: open the Train stream after Join returns"));
  }
  if (m.attached) return absl::AlreadyExistsError(absl::StrCat(RankName(rank), " already has a Train stream"));
  if (m.state != v1::WORKER_JOINED) {
    return absl::FailedPreconditionError(absl::StrCat(RankName(rank), " is ", v1::WorkerState_Name(m.state),
                                                      "; a rank gets one Train stream per job"));
  }
  // Why: from now on the rank's plans go to this stream, and it must be heard.
  m.attached = true;
  m.state = v1::WORKER_TRAINING;
  m.last_activity = Clock::now();
  m.last_heard = m.last_activity;
  m.stream = sink.get();
  m.sink = std::move(sink);
  m.sink->job_ranks = 1;
  return absl::OkStatus();
}

absl::Status JobState::AttachHostLocked(const v1::Hello& hello, std::shared_ptr<PlanSink> sink) {
  const int n = hello.ranks_size();
  if (n > cfg_.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello.ranks lists ", n, " ranks but the world has ", cfg_.world_size));
  }
  std::vector<bool> seen(static_cast<size_t>(cfg_.world_size), false);
  for (int rank : hello.ranks()) {
    if (rank < 0 || rank >= cfg_.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("hello.ranks names rank ", rank, ", out of range for world size ", cfg_.world_size));
    }
    if (seen[static_cast<size_t>(rank)]) {
      return absl::InvalidArgumentError(absl::StrCat("hello.ranks names rank ", rank, " twice"));
    }
    seen[static_cast<size_t>(rank)] = true;
  }
  if (hello.generation() != generation_) {
    if (hello.generation() > 0 && hello.generation() < generation_) {
      return CheckStreamGenerationLocked(hello.ranks(0), hello.generation());
    }
    return absl::FailedPreconditionError(absl::StrCat("hello.generation ", hello.generation(),
                                                      " is not the job's generation ", generation_, ": Join again"));
  }
  if (state_ == v1::JOB_ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", reason_));
  if (state_ == v1::JOB_FINISHED) return absl::FailedPreconditionError("job has finished");
  const int first = hello.ranks(0);
  for (int rank : hello.ranks()) {
    const RankRuntime& m = ranks_[static_cast<size_t>(rank)];
    if (state_ == v1::JOB_WAITING || !rendezvous_.member(rank).joined) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " (in hello.ranks) has not completed Join: open the Train stream after Join returns"));
    }
    if (m.attached) return absl::AlreadyExistsError(absl::StrCat(RankName(rank), " already has a Train stream"));
    if (m.state != v1::WORKER_JOINED) {
      return absl::FailedPreconditionError(absl::StrCat(RankName(rank), " is ", v1::WorkerState_Name(m.state),
                                                        "; a rank gets one Train stream per job"));
    }
    if (rendezvous_.member(rank).host_id != rendezvous_.member(first).host_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hello.ranks mixes hosts: ", RankName(first), " is on host '", rendezvous_.member(first).host_id, "' but ",
          RankName(rank), " on host '", rendezvous_.member(rank).host_id,
          "'; a host stream carries the ranks of one host"));
    }
  }
  // Why: every listed rank's plans now go to this one stream (each plan
  // once), and each rank must still be heard on it, as on its own stream.
  const auto now = Clock::now();
  for (int rank : hello.ranks()) {
    RankRuntime& m = ranks_[static_cast<size_t>(rank)];
    m.attached = true;
    m.state = v1::WORKER_TRAINING;
    m.last_activity = now;
    m.last_heard = now;
    m.stream = sink.get();
    m.sink = sink;
  }
  sink->job_ranks = n;
  return absl::OkStatus();
}

absl::Status JobState::CheckOnStreamLocked(const PlanSink* stream, int64_t generation, int rank,
                                           const char* what) const {
  if (rank < 0 || rank >= cfg_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, " names rank ", rank, ", out of range for world size ",
                                                   cfg_.world_size));
  }
  if (generation != generation_) return CheckStreamGenerationLocked(rank, generation);
  if (ranks_[static_cast<size_t>(rank)].stream != stream) {
    return absl::InvalidArgumentError(absl::StrCat(what, " names rank ", rank,
                                                   ", which is not one of this Train stream's ranks (hello.ranks)"));
  }
  return absl::OkStatus();
}

absl::Status JobState::CheckStreamGenerationLocked(int rank, int64_t generation) const {
  if (generation == generation_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", rank, " belongs to generation ", generation, " of job '", cfg_.job_id, "', which has ended (",
      last_restart_reason_.empty() ? "restarted" : last_restart_reason_, "); the job is at generation ", generation_,
      ": this worker must exit, and a new one Join generation ", generation_));
}

absl::Status JobState::Report(int rank, int64_t generation, const v1::Report& r) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  absl::Status st = ReportLocked(rank, generation, r, &out);
  if (st.ok() && state_ != v1::JOB_ABORTED) EmitReadyPlansLocked(&out);
  return st;
}

absl::Status JobState::HostReport(const PlanSink* stream, int64_t generation, const v1::Report& r) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (state_ == v1::JOB_ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", reason_));
  if (absl::Status st = CheckOnStreamLocked(stream, generation, r.rank(), "report"); !st.ok()) return st;
  absl::Status st = ReportLocked(r.rank(), generation, r, &out);
  if (st.ok() && state_ != v1::JOB_ABORTED) EmitReadyPlansLocked(&out);
  return st;
}

absl::Status JobState::ReportBatch(const PlanSink* stream, int64_t generation, const v1::ReportBatch& batch) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (state_ == v1::JOB_ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", reason_));
  if (batch.reports_size() == 0) return absl::InvalidArgumentError("report_batch holds no report");
  if (batch.reports_size() > cfg_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("report_batch holds ", batch.reports_size(),
                                                   " reports but the world has ", cfg_.world_size, " ranks"));
  }
  // Why one lock for the batch: the point of a host stream is that the
  // coordinator handles a host's reports of an iteration as one message,
  // and the plans they complete go out once, after the last of them.
  for (const v1::Report& r : batch.reports()) {  // first: a batch naming a stranger changes nothing
    if (absl::Status st = CheckOnStreamLocked(stream, generation, r.rank(), "report_batch report"); !st.ok()) {
      return st;
    }
  }
  for (const v1::Report& r : batch.reports()) {
    if (absl::Status st = ReportLocked(r.rank(), generation, r, &out); !st.ok()) return st;
    if (state_ == v1::JOB_ABORTED) return absl::OkStatus();  // the report ended the job; the rest are moot
  }
  EmitReadyPlansLocked(&out);
  return absl::OkStatus();
}

absl::Status JobState::ReportLocked(int rank, int64_t generation, const v1::Report& r, Outbox* out) {
  if (state_ == v1::JOB_ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", reason_));
  if (rank < 0 || rank >= cfg_.world_size) return absl::InvalidArgumentError(absl::StrCat("unknown rank ", rank));
  if (absl::Status st = CheckStreamGenerationLocked(rank, generation); !st.ok()) return st;
  RankRuntime& m = ranks_[static_cast<size_t>(rank)];
  if (!m.attached || m.state != v1::WORKER_TRAINING) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " is not training (", v1::WorkerState_Name(m.state), ")"));
  }
  if (absl::Status st = plans_.Validate(rank, r); !st.ok()) return st;
  plans_.Add(rank, r);
  if (plans_.started() && last_plan_time_ == Clock::time_point{}) last_plan_time_ = Clock::now();
  m.last_iteration = r.iteration();
  m.last_step_ms = r.last_step_ms();
  m.last_loss = r.loss();
  m.last_activity = Clock::now();
  m.last_heard = m.last_activity;
  m.last_report_unix_ms = NowUnixMs();
  if (r.iteration() > min_done_iteration_) {
    // Why: a rank that already finished will never report this iteration.
    AbortLocked(absl::StrCat(RankName(min_done_rank_), " finished after iteration ", min_done_iteration_, " but ",
                             RankName(rank), " reported iteration ", r.iteration(),
                             ": ranks ran different numbers of steps"),
                out);
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

void JobState::EmitReadyPlansLocked(Outbox* out) {
  while (plans_.Ready()) {
    auto plan = std::make_shared<const v1::Plan>(plans_.Emit());
    last_plan_time_ = Clock::now();
    if (plan->has_bucket_plan()) {
      const v1::BucketPlan& bp = plan->bucket_plan();
      events_.Append(v1::EVENT_PLAN_APPLIED, -1, bp.applies_from_iteration(),
                     absl::StrCat("bucket plan ", bp.id(), " (", bp.buckets_size(),
                                  " buckets, from rank 0's ready order) applies from iteration ",
                                  bp.applies_from_iteration()));
    }
    BroadcastLocked(std::move(plan), out);
  }
}

void JobState::BroadcastLocked(PlanPtr plan, Outbox* out) {
  if (cfg_.test_only_plan_delay.count() > 0) {
    // Why (test only): hold the plan back to simulate a slow coordinator.
    const auto at = scheduler_->Now() + cfg_.test_only_plan_delay;
    delayed_.emplace_back(at, std::move(plan));
    scheduler_->RunAt(at, [this] { DeliverDuePlans(); });
    return;
  }
  DeliverLocked(plan, out);
}

void JobState::DeliverLocked(const PlanPtr& plan, Outbox* out) {
  // Why the sequence number: a host stream's sink serves several ranks and
  // must get each plan once (plans are identical on every rank).
  const uint64_t seq = ++broadcast_seq_;
  for (int r = 0; r < cfg_.world_size; ++r) {
    RankRuntime& m = ranks_[static_cast<size_t>(r)];
    if (m.state != v1::WORKER_TRAINING || !m.sink || m.sink->job_last_broadcast == seq) continue;
    m.sink->job_last_broadcast = seq;
    PushLocked(r, plan, out);
  }
}

void JobState::DeliverDuePlans() {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  const auto now = scheduler_->Now();
  while (!delayed_.empty() && delayed_.front().first <= now) {
    if (state_ != v1::JOB_ABORTED) DeliverLocked(delayed_.front().second, &out);
    delayed_.pop_front();
  }
}

void JobState::PushLocked(int rank, const PlanPtr& plan, Outbox* out) {
  const std::shared_ptr<PlanSink>& sink = ranks_[static_cast<size_t>(rank)].sink;
  if (sink && sink->Push(plan)) {
    out->flushes.push_back(sink);
    out->runner = flush_runner_;
  }
}

void JobState::CloseSinkLocked(int rank) {
  RankRuntime& m = ranks_[static_cast<size_t>(rank)];
  if (!m.sink) return;
  // Why: a host stream still carries its other ranks; it closes with its last.
  if (--m.sink->job_ranks <= 0) m.sink->Close();
  m.sink.reset();
}

void JobState::AbortLocked(const std::string& reason, Outbox* out) {
  if (state_ == v1::JOB_ABORTED || state_ == v1::JOB_FINISHED) return;
  // Why: a rank was lost (or the coordinator is going away); nobody can
  // finish the job, so every rank stops now and later Joins are refused.
  state_ = v1::JOB_ABORTED;
  reason_ = reason;
  FailQueuedJoinsLocked(absl::StrCat("job '", cfg_.job_id, "' was aborted (", reason, ")"), out);
  auto plan = std::make_shared<v1::Plan>();
  plan->set_iteration(plans_.next_plan());
  plan->set_action(v1::ABORT);
  plan->set_reason(reason);
  DeliverLocked(plan, out);  // never delayed
  delayed_.clear();
  for (int r = 0; r < cfg_.world_size; ++r) CloseSinkLocked(r);
  FailWaitersLocked(absl::StrCat("job '", cfg_.job_id, "' ended during rendezvous: ", reason), out);
  events_.Append(v1::EVENT_ABORTED, -1, plans_.next_plan(), absl::StrCat("job aborted: ", reason));
}

void JobState::MarkLostLocked(int rank, const std::string& why, Outbox* out) {
  MarkRanksLostLocked({rank}, why, out);
}

void JobState::MarkRanksLostLocked(const std::vector<int>& candidates, const std::string& why, Outbox* out) {
  std::vector<int> lost;
  std::vector<std::string> names;
  for (int rank : candidates) {
    const RankRuntime& m = ranks_[static_cast<size_t>(rank)];
    if (m.state == v1::WORKER_LOST || m.state == v1::WORKER_DONE) continue;
    lost.push_back(rank);
    names.push_back(RankName(rank));
  }
  if (lost.empty()) return;
  const std::string msg = absl::StrCat(absl::StrJoin(names, ", "), " lost: ", why);
  const bool restartable = cfg_.max_restarts > 0;
  for (int rank : lost) {
    RankRuntime& m = ranks_[static_cast<size_t>(rank)];
    m.state = v1::WORKER_LOST;
    m.exit_reason = msg;
    if (m.sink) {
      // Tell the rank itself too, in case its stream still works (e.g. it was
      // blamed for a missing report): it stops instead of waiting. Plan.ranks
      // names it, so a host stream passes this one to it alone.
      auto plan = std::make_shared<v1::Plan>();
      plan->set_iteration(plans_.next_plan());
      plan->set_action(v1::ABORT);
      plan->set_reason(absl::StrCat("this rank was declared lost: ", msg));
      plan->add_ranks(rank);
      PushLocked(rank, plan, out);
      CloseSinkLocked(rank);
    }
    events_.Append(v1::EVENT_LOST, rank, plans_.next_plan(),
                   restartable ? absl::StrCat(msg, " (generation ", generation_, ")") : msg);
  }
  if (CanRestartLocked()) {
    RestartLocked(lost.front(), msg, out);
    return;
  }
  AbortLocked(restartable && state_ == v1::JOB_RUNNING
                  ? absl::StrCat(msg, " (generation ", generation_, "; all ", cfg_.max_restarts, " restarts used)")
                  : msg,
              out);
}

void JobState::RestartLocked(int lost_rank, const std::string& why, Outbox* out) {
  // Why: restartable mode and restarts left: this generation cannot go on
  // without the lost rank, but the job can, once the whole world rejoins
  // (from a checkpoint) as the next generation.
  const int64_t ended = generation_;
  ++restarts_;
  const std::string ask =
      absl::StrCat("restart ", restarts_, " of ", cfg_.max_restarts, ": every rank must Join generation ", ended + 1);
  auto plan = std::make_shared<v1::Plan>();
  plan->set_iteration(plans_.next_plan());
  plan->set_action(v1::ABORT);
  plan->set_reason(absl::StrCat("generation ", ended, " aborted: ", why, "; ", ask));
  DeliverLocked(plan, out);  // never delayed
  delayed_.clear();
  for (int r = 0; r < cfg_.world_size; ++r) CloseSinkLocked(r);
  events_.Append(v1::EVENT_RESTARTING, lost_rank, plans_.next_plan(),
                 absl::StrCat("generation ", ended, " aborted (", why, "); ", ask));
  if (generation_end_hook_) {
    out->calls.push_back([hook = generation_end_hook_, prefix = store_prefix_] { hook(prefix); });
  }
  // The next generation: everything per generation starts afresh.
  generation_ = ended + 1;
  events_.SetGeneration(generation_);
  last_restart_reason_ = absl::StrCat("generation ", ended, ": ", why);
  reason_ = absl::StrCat("waiting for ", cfg_.world_size, " ranks to Join generation ", generation_, " (restart ",
                         restarts_, " of ", cfg_.max_restarts, "; generation ", ended, " aborted: ", why, ")");
  state_ = v1::JOB_WAITING;
  store_prefix_ = StorePrefix(cfg_.job_id, generation_);
  rendezvous_ = Rendezvous(cfg_.world_size);
  plans_ = PlanAggregator(cfg_.world_size, cfg_.plan_lookahead);
  ranks_.assign(static_cast<size_t>(cfg_.world_size), RankRuntime{});
  world_complete_time_ = Clock::time_point{};
  last_plan_time_ = Clock::time_point{};
  min_done_iteration_ = std::numeric_limits<int64_t>::max();
  min_done_rank_ = -1;
  ReplayQueuedJoinsLocked(out);
}

void JobState::MaybeFinishLocked(Outbox* out) {
  if (!Running()) return;
  for (const auto& m : ranks_) {
    if (m.state != v1::WORKER_DONE) return;
  }
  // Why: every rank is done; nothing more can happen in this job.
  state_ = v1::JOB_FINISHED;
  FailQueuedJoinsLocked(absl::StrCat("job '", cfg_.job_id, "' has finished; start a new coordinator"), out);
  events_.Append(v1::EVENT_FINISHED, -1, plans_.last_plan(),
                 absl::StrCat("job finished after iteration ", plans_.last_plan()));
}

absl::Status JobState::Done(int rank, int64_t generation, const v1::Done& done) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (rank < 0 || rank >= cfg_.world_size) return absl::InvalidArgumentError("unknown rank");
  if (absl::Status st = CheckStreamGenerationLocked(rank, generation); !st.ok()) return st;
  return DoneLocked(rank, done, &out);
}

absl::Status JobState::HostDone(const PlanSink* stream, int64_t generation, const v1::Done& done) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (absl::Status st = CheckOnStreamLocked(stream, generation, done.rank(), "done"); !st.ok()) return st;
  return DoneLocked(done.rank(), done, &out);
}

absl::Status JobState::DoneLocked(int rank, const v1::Done& done, Outbox* out) {
  RankRuntime& m = ranks_[static_cast<size_t>(rank)];
  if (m.state != v1::WORKER_TRAINING) {
    return absl::FailedPreconditionError(
        absl::StrCat("Done from rank ", rank, " which is ", v1::WorkerState_Name(m.state)));
  }
  std::string reason = done.exit_reason().substr(0, kMaxStringBytes);
  if (done.exit_code() != 0 && Running()) {
    MarkLostLocked(rank, absl::StrCat("failed (exit code ", done.exit_code(), "): ", reason), out);
    return absl::OkStatus();
  }
  // Why: the rank finished cleanly; its stream gets no more plans (a host
  // stream goes on for its other ranks).
  m.state = v1::WORKER_DONE;
  m.exit_reason = reason;
  m.attached = false;
  CloseSinkLocked(rank);
  events_.Append(v1::EVENT_DONE, rank, m.last_iteration, absl::StrCat(RankName(rank), " done: ", reason));
  if (m.last_iteration < min_done_iteration_) {
    min_done_iteration_ = m.last_iteration;
    min_done_rank_ = rank;
  }
  int other = -1;
  const int64_t max_reported = plans_.max_reported(&other);
  if (max_reported > m.last_iteration && state_ != v1::JOB_ABORTED) {
    // Why: another rank already reported an iteration this one never will.
    AbortLocked(absl::StrCat(RankName(rank), " finished after iteration ", m.last_iteration, " while ",
                             RankName(other), " reported iteration ", max_reported,
                             ": ranks ran different numbers of steps"),
                out);
    return absl::OkStatus();
  }
  MaybeFinishLocked(out);
  return absl::OkStatus();
}

absl::Status JobState::Heartbeat(int rank, int64_t generation, const v1::Heartbeat& hb, Clock::time_point now) {
  std::lock_guard<std::mutex> l(mu_);
  if (rank < 0 || rank >= cfg_.world_size) return absl::InvalidArgumentError("unknown rank");
  if (absl::Status st = CheckStreamGenerationLocked(rank, generation); !st.ok()) return st;
  if (hb.rank() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat names rank ", hb.rank(), " on the Train stream of rank ", rank));
  }
  HeartbeatLocked(rank, hb, now);
  return absl::OkStatus();
}

absl::Status JobState::HostHeartbeat(const PlanSink* stream, int64_t generation, const v1::Heartbeat& hb,
                                     Clock::time_point now) {
  std::lock_guard<std::mutex> l(mu_);
  if (absl::Status st = CheckOnStreamLocked(stream, generation, hb.rank(), "heartbeat"); !st.ok()) return st;
  HeartbeatLocked(hb.rank(), hb, now);
  return absl::OkStatus();
}

void JobState::HeartbeatLocked(int rank, const v1::Heartbeat& hb, Clock::time_point now) {
  RankRuntime& m = ranks_[static_cast<size_t>(rank)];
  if (m.state != v1::WORKER_TRAINING) return;  // finishing, or already lost
  m.last_heard = std::max(m.last_heard, now);
  m.heartbeat_iteration = hb.iteration();
}

void JobState::StreamClosed(int rank, int64_t generation, const std::string& cause) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (rank < 0 || rank >= cfg_.world_size) return;
  if (generation != generation_) return;  // a stream of an ended generation: its rank is gone already
  RankRuntime& m = ranks_[static_cast<size_t>(rank)];
  m.attached = false;
  CloseSinkLocked(rank);
  RanksDisconnectedLocked({rank}, cause, &out);
}

absl::Status JobState::RankClosed(const PlanSink* stream, int64_t generation, const v1::RankClosed& closed) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (absl::Status st = CheckOnStreamLocked(stream, generation, closed.rank(), "rank_closed"); !st.ok()) return st;
  RankRuntime& m = ranks_[static_cast<size_t>(closed.rank())];
  m.attached = false;
  CloseSinkLocked(closed.rank());
  RanksDisconnectedLocked({closed.rank()},
                          closed.cause().empty() ? std::string("stream closed")
                                                 : closed.cause().substr(0, kMaxStringBytes),
                          &out);
  return absl::OkStatus();
}

void JobState::HostStreamClosed(const PlanSink* stream, int64_t generation, const std::string& cause) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (generation != generation_ || stream == nullptr) return;  // an ended generation: its ranks are gone already
  std::vector<int> gone;
  for (int r = 0; r < cfg_.world_size; ++r) {
    RankRuntime& m = ranks_[static_cast<size_t>(r)];
    if (m.stream != stream || !m.attached) continue;
    m.attached = false;
    CloseSinkLocked(r);
    gone.push_back(r);
  }
  RanksDisconnectedLocked(gone, cause, &out);
}

void JobState::RanksDisconnectedLocked(const std::vector<int>& ranks, const std::string& cause, Outbox* out) {
  std::vector<int> training;
  for (int r : ranks) {
    if (ranks_[static_cast<size_t>(r)].state == v1::WORKER_TRAINING) training.push_back(r);  // else Done, or lost
  }
  if (training.empty()) return;
  if (state_ == v1::JOB_ABORTED || state_ == v1::JOB_FINISHED) {
    for (int r : training) {
      ranks_[static_cast<size_t>(r)].state = v1::WORKER_DONE;
      ranks_[static_cast<size_t>(r)].exit_reason = absl::StrCat("disconnected after the job ended: ", cause);
    }
    return;
  }
  if (plans_.StopPlanSent()) {
    // Why: the stop plan is out, so these ranks had nothing left to do.
    for (int r : training) {
      ranks_[static_cast<size_t>(r)].state = v1::WORKER_DONE;
      ranks_[static_cast<size_t>(r)].exit_reason = absl::StrCat("disconnected after the stop plan: ", cause);
    }
    MaybeFinishLocked(out);
    return;
  }
  MarkRanksLostLocked(training, cause, out);
}

void JobState::CheckLiveness(Clock::time_point now) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  if (!Running()) return;
  if (plans_.StopPlanSent()) return;  // ranks are finishing; nothing more is expected
  std::vector<RankActivity> activity(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const RankRuntime& m = ranks_[r];
    RankActivity& a = activity[r];
    a.phase = m.state == v1::WORKER_JOINED     ? RankActivity::Phase::kJoined
              : m.state == v1::WORKER_TRAINING ? RankActivity::Phase::kTraining
                                               : RankActivity::Phase::kOther;
    a.last_heard = m.last_heard;
    a.last_activity = m.last_activity;
    a.reported_pending = plans_.ReportedPending(static_cast<int>(r));
  }
  LivenessParams params{cfg_.report_timeout, cfg_.heartbeat_timeout, HeartbeatInterval(cfg_)};
  std::optional<LostVerdict> lost =
      JudgeLiveness(activity, params, now, world_complete_time_,
                    std::max(last_plan_time_, world_complete_time_), plans_.next_plan());
  if (lost) MarkLostLocked(lost->rank, lost->why, &out);
}

v1::ShutdownResponse JobState::Shutdown(const std::string& reason) {
  Outbox out;
  std::lock_guard<std::mutex> l(mu_);
  v1::ShutdownResponse resp;
  const std::string why = reason.empty() ? "shutdown requested" : reason.substr(0, kMaxStringBytes);
  switch (state_) {
    case v1::JOB_WAITING:
      // Why: nobody trains yet; the job ends now and the waiting Joins hear why.
      state_ = v1::JOB_FINISHED;
      reason_ = absl::StrCat(why, " before the world was complete");
      events_.Append(v1::EVENT_FINISHED, -1, -1, reason_);
      FailWaitersLocked(absl::StrCat("job '", cfg_.job_id, "' ended during rendezvous: ", reason_), &out);
      resp.set_stop_after_iteration(-1);
      break;
    case v1::JOB_RUNNING: {
      // Why: stop every rank after the same iteration (plan_aggregator.h).
      state_ = v1::JOB_STOPPING;
      reason_ = why;
      FailQueuedJoinsLocked(
          absl::StrCat("job '", cfg_.job_id, "' is stopping (", why, "): no next generation will form"), &out);
      plans_.ScheduleStop(why);
      const int64_t stop = plans_.stop_after();
      resp.set_stop_after_iteration(stop);
      events_.Append(v1::EVENT_STOPPING, -1, stop,
                     absl::StrCat(why, ": every rank stops after iteration ", stop,
                                  plans_.started() ? "" : " (counted from the first iteration)"));
      break;
    }
    default:
      resp.set_already_stopping(state_ == v1::JOB_STOPPING);
      resp.set_stop_after_iteration(plans_.stop_scheduled() ? plans_.stop_after() : -1);
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
  return generation_;
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
