#include "server/generation.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/status_macros.h"
#include "server/limits.h"
#include "server/liveness_policy.h"  // DurationText

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

}  // namespace

Generation::Generation(const JobConfig& cfg, int64_t number, std::string previous_end, int world_size)
    : cfg_(cfg),
      number_(number),
      previous_end_(std::move(previous_end)),
      store_prefix_(StorePrefix(cfg.job_id, number)),
      rendezvous_(world_size > 0 ? world_size : cfg.world_size),
      plans_(world_size > 0 ? world_size : cfg.world_size, cfg.plan_lookahead),
      ranks_(static_cast<size_t>(world_size > 0 ? world_size : cfg.world_size)) {
  plans_.set_epoch(cfg.epoch);
}

std::unique_ptr<Generation> Generation::OfJoined(std::vector<int>* old_ranks) const {
  auto g = std::make_unique<Generation>(cfg_, number_, previous_end_, rendezvous_.joined());
  g->rendezvous_ = rendezvous_.Compacted(old_ranks);
  if (g->rendezvous_.has_reference()) {
    g->plans_.SetModel(g->rendezvous_.param_bytes(), g->rendezvous_.first_bucket_cap(), g->rendezvous_.bucket_cap());
  }
  g->plans_.CarryBucketPlan(plans_.carried_bucket_plan());
  for (size_t i = 0; i < old_ranks->size(); ++i) g->ranks_[i] = ranks_[static_cast<size_t>((*old_ranks)[i])];
  g->rejoin_passed_ = rejoin_passed_;
  return g;
}

std::string Generation::RankNames(const std::vector<int>& ranks) const {
  std::vector<std::string> names;
  for (int r : ranks) names.push_back(RankName(r));
  return absl::StrJoin(names, ", ");
}

std::string Generation::JoinRefusal(int64_t asked, int64_t joinable, int restarts) const {
  const std::string head = absl::StrCat("this worker asks to join generation ", asked, " of job '", cfg_.job_id, "'");
  if (asked < number_) {
    return absl::StrCat(head, ", which has ended (", previous_end_.empty() ? "restarted" : previous_end_,
                        "); the job is at generation ", number_,
                        ": the worker belongs to an old generation; restart it (JoinRequest.generation 0 joins the "
                        "one being formed)");
  }
  if (asked == number_) {
    return absl::StrCat(head, ", which is complete and running; a new worker can only join generation ", joinable);
  }
  return absl::StrCat(head, ", but the next one to form is generation ", joinable, " (", restarts, " of ",
                      cfg_.max_restarts, " restarts used)");
}

absl::Status Generation::WorldIncomplete() const {
  return absl::DeadlineExceededError(absl::StrCat(
      "world incomplete after ", DurationText(cfg_.join_timeout), ": ", rendezvous_.joined(), " of ",
      world_size(), " ranks joined; still missing ranks ", absl::StrJoin(rendezvous_.MissingRanks(16), ","),
      " (start the remaining workers, or raise --join-timeout)"));
}

absl::Status Generation::QueuedJoinExpired() const {
  return absl::DeadlineExceededError(absl::StrCat(
      "generation ", number_, " of job '", cfg_.job_id, "' still runs after ", DurationText(cfg_.join_timeout),
      ": this Join waited for generation ", number_ + 1, ", which forms only once a rank of generation ", number_,
      " is lost", cfg_.Elastic() ? " or the job regroups" : "",
      " (is this worker extra, or is its rank still running?)"));
}

absl::Status Generation::WorldFull() const {
  return absl::FailedPreconditionError(absl::StrCat("world is full: all ", world_size(), " ranks of job '",
                                                    cfg_.job_id, "' joined generation ", number_,
                                                    " and it is running"));
}

absl::Status Generation::WorldCannotForm(const absl::Status& refusal) const {
  return absl::FailedPreconditionError(absl::StrCat("a worker joining generation ", number_, " of job '", cfg_.job_id,
                                                    "' was refused, so the world cannot form: ", refusal.message()));
}

std::string Generation::StartText() const {
  const int64_t start = rendezvous_.start_iteration();
  return absl::StrCat("world complete: ", world_size(),
                      world_size() < cfg_.world_size ? absl::StrCat(" of ", cfg_.world_size) : "", " ranks",
                      number_ > 1 || start > 0
                          ? absl::StrCat(" (generation ", number_, ", from iteration ", start, ")")
                          : std::string(),
                      start_note_.empty() ? "" : ": ", start_note_);
}

absl::Status Generation::EndedGeneration(int r, int64_t generation) const {
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", r, " belongs to generation ", generation, " of job '", cfg_.job_id, "', which has ended (",
      previous_end_.empty() ? "restarted" : previous_end_, "); the job is at generation ", number_,
      ": this worker must exit, and a new one Join generation ", number_));
}

absl::Status Generation::CheckStreamGeneration(int r, int64_t asked) const {
  if (asked == number_) return absl::OkStatus();
  if (asked > 0 && asked < number_) return EndedGeneration(r, asked);
  return absl::FailedPreconditionError(
      absl::StrCat("hello.generation ", asked, " is not the job's generation ", number_, ": Join again"));
}

absl::StatusOr<int> Generation::AddMember(const v1::JoinRequest& req) {
  absl::StatusOr<int> r = rendezvous_.PickRank(req);
  if (!r.ok()) return r;
  const bool first = !rendezvous_.has_reference();
  rendezvous_.Add(*r, req);
  if (first) {
    plans_.SetModel(rendezvous_.param_bytes(), rendezvous_.first_bucket_cap(), rendezvous_.bucket_cap());
  }
  rank(*r) = RankRuntime{};
  rank(*r).state = v1::WORKER_JOINED;
  return r;
}

absl::StatusOr<std::unique_ptr<Generation>> Generation::Resumed(const JobConfig& cfg, const v1::Hello& hello,
                                                                Clock::time_point now) {
  const v1::Resume& res = hello.resume();
  const int n = res.world_size();
  if (n < cfg.min_world_size || n > cfg.world_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", hello.rank(), " resumes generation ", hello.generation(), " with ", n, " ranks, but job '",
        cfg.job_id, "' has world size ", cfg.world_size,
        cfg.Elastic() ? absl::StrCat(" (at least ", cfg.min_world_size, ")") : std::string(),
        ": start the coordinator with the flags it ran with"));
  }
  if (res.plan_lookahead() != cfg.plan_lookahead) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", hello.rank(), " runs with plan lookahead ", res.plan_lookahead(), " but this coordinator's is ",
        cfg.plan_lookahead, ": start it with --plan-lookahead=", res.plan_lookahead()));
  }
  auto g = std::make_unique<Generation>(cfg, hello.generation(), "", n);
  g->resumed_ = true;
  g->first_resume_ = res;
  g->world_complete_time_ = now;
  // Why K back: no rank holds a plan more than K ahead of another's (its
  // report of p+K needed Plan{p}), and each keeps its reports back to
  // next_plan - 2K, so every rank can report every iteration from here.
  g->resumed_at_ = std::max(res.start_iteration(), res.next_plan() - cfg.plan_lookahead);
  PSYNC_RETURN_IF_ERROR(g->AddResumed(hello));
  g->plans_.Resume(g->resumed_at_, res.bucket_plan(), res.bucket_plan_announced_in(), res.stop_after(),
                   res.stop_reason(), res.regroup());
  return g;
}

namespace {

// What a Resume may say at all (coordinator.proto limits), before it is
// compared with anything: iterations in order and in range, a short reason.
absl::Status CheckResumeFields(const v1::Resume& res, int rank) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("resume of rank ", rank, ": ", what));
  };
  if (res.start_iteration() < 0 || res.start_iteration() > kMaxIteration) {
    return bad(absl::StrCat("start_iteration ", res.start_iteration(), " is out of range 0..2^62"));
  }
  if (res.next_plan() < res.start_iteration() || res.next_plan() > kMaxIteration) {
    return bad(absl::StrCat("next_plan ", res.next_plan(), " is before start_iteration ", res.start_iteration(),
                            " or beyond 2^62"));
  }
  if (res.bucket_plan_announced_in() < -1 || res.bucket_plan_announced_in() >= res.next_plan()) {
    return bad(absl::StrCat("bucket_plan_announced_in ", res.bucket_plan_announced_in(),
                            " is not -1 or an iteration before next_plan ", res.next_plan()));
  }
  if (res.stop_after() < -1 || res.stop_after() > kMaxIteration) {
    return bad(absl::StrCat("stop_after ", res.stop_after(), " is out of range -1..2^62"));
  }
  if (res.stop_reason().size() > kMaxStringBytes) {
    return bad(absl::StrCat("stop_reason is ", res.stop_reason().size(), " bytes, more than ", kMaxStringBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Generation::AddResumed(const v1::Hello& hello) {
  const v1::Resume& res = hello.resume();
  const int r = hello.rank();
  PSYNC_RETURN_IF_ERROR(CheckResumeFields(res, r));
  auto differs = [&](const char* what, int64_t theirs, int64_t ours) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", r, " resumes generation ", number_, " with ", what, " ",
                                                      theirs, " but the first rank to resume had ", ours));
  };
  if (res.world_size() != world_size()) return differs("world size", res.world_size(), world_size());
  if (res.start_iteration() != first_resume_.start_iteration()) {
    return differs("start iteration", res.start_iteration(), first_resume_.start_iteration());
  }
  if (res.plan_lookahead() != first_resume_.plan_lookahead()) {
    return differs("plan lookahead", res.plan_lookahead(), first_resume_.plan_lookahead());
  }
  if (rendezvous_.has_reference() && res.next_plan() < resumed_at_) {
    return differs("its next plan at iteration", res.next_plan(), resumed_at_);
  }
  v1::JoinRequest req = res.join();
  req.set_requested_rank(r);
  PSYNC_RETURN_IF_ERROR(CheckJoinRequest(req, cfg_));
  PSYNC_RETURN_IF_ERROR(AddMember(req).status());
  // Why: it may hold a stop plan the first rank had not received; no plan
  // went out since (none can before every rank re-attached).
  plans_.KeepStop(res.stop_after(), res.stop_reason(), res.regroup());
  // It may have started every step up to K past the plans it holds.
  plans_.NoStopBefore(res.next_plan() + res.plan_lookahead() - 1);
  return absl::OkStatus();
}

int64_t Generation::FurthestReported() const {
  int64_t furthest = -1;
  for (const RankRuntime& r : ranks_) furthest = std::max(furthest, r.last_iteration);
  return furthest;
}

void Generation::RemoveMember(int r) {
  rendezvous_.Remove(r);
  rank(r) = RankRuntime{};
}

std::shared_ptr<const SharedJoinResponse> Generation::Start(Clock::time_point now) {
  world_complete_time_ = now;
  // Why: the world is complete, so the resume agreement can decide the step
  // once for the whole generation; no Join can change it afterwards.
  start_note_ = rendezvous_.Agree();
  // Every rank starts at that iteration (a resumed generation starts at its
  // checkpoint's step); the plan window opens there.
  plans_.Start(rendezvous_.start_iteration());
  auto shared = std::make_shared<SharedJoinResponse>();
  v1::JoinResponse& resp = shared->response;
  resp.set_world_size(world_size());
  resp.set_generation(number_);
  resp.set_store_prefix(store_prefix_);
  *resp.mutable_initial_bucket_plan() = plans_.current_bucket_plan();
  resp.set_job_id(cfg_.job_id);
  resp.set_heartbeat_interval_ms(HeartbeatInterval(cfg_).count());
  resp.set_plan_lookahead(cfg_.plan_lookahead);
  resp.set_start_iteration(rendezvous_.start_iteration());
  if (rendezvous_.heal_source() >= 0) resp.set_heal_source(rendezvous_.heal_source());
  // Only where a lost rank can be recovered at all (--max-restarts > 0).
  resp.set_live_recovery(cfg_.recovery == JobConfig::Recovery::kLive && cfg_.max_restarts > 0);
  rendezvous_.FillHosts(&resp);
  shared->bytes = resp.SerializeAsString();
  return shared;
}

absl::Status Generation::CheckAttachable(const std::vector<int>& ranks, bool host) const {
  const int first = ranks.front();
  for (int r : ranks) {
    const RankRuntime& m = rank(r);
    if ((!rendezvous_.complete() && !resumed_) || !rendezvous_.member(r).joined) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", r, host ? " (in hello.ranks)" : "",
                                                        " has not completed Join: open the Train stream after "
                                                        "Join returns"));
    }
    if (m.attached) return absl::AlreadyExistsError(absl::StrCat(RankName(r), " already has a Train stream"));
    if (m.state != v1::WORKER_JOINED && !m.reattaching) {
      return absl::FailedPreconditionError(absl::StrCat(RankName(r), " is ", v1::WorkerState_Name(m.state),
                                                        "; a rank gets one Train stream per job"));
    }
    if (rendezvous_.member(r).host_id != rendezvous_.member(first).host_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hello.ranks mixes hosts: ", RankName(first), " is on host '", rendezvous_.member(first).host_id,
          "' but ", RankName(r), " on host '", rendezvous_.member(r).host_id,
          "'; a host stream carries the ranks of one host"));
    }
  }
  return absl::OkStatus();
}

void Generation::Attach(const std::vector<int>& ranks, const PlanSink* stream, Clock::time_point now) {
  for (int r : ranks) {
    RankRuntime& m = rank(r);
    m.attached = true;
    m.reattaching = false;
    m.state = v1::WORKER_TRAINING;
    m.last_activity = now;
    m.last_heard = now;
    m.stream = stream;
  }
}

absl::Status Generation::Reattach(const v1::Hello& hello) {
  const int r = hello.rank();
  if (r < 0 || r >= world_size() || rank(r).state != v1::WORKER_TRAINING) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", r, " resumes generation ", number_, ", in which it is not training (",
        r >= 0 && r < world_size() ? v1::WorkerState_Name(rank(r).state) : "no such rank",
        "): this worker must exit, and its replacement Join"));
  }
  const int64_t next = hello.resume().next_plan();
  if (next <= plans_.last_plan() && (recent_plans_.empty() || recent_plans_.front()->iteration() > next)) {
    return absl::FailedPreconditionError(absl::StrCat(
        RankName(r), " resumes without the plan of iteration ", next, ", older than the plans kept (",
        recent_plans_.empty() ? std::string("none") : absl::StrCat("from ", recent_plans_.front()->iteration()),
        "): this worker must exit, and its replacement Join"));
  }
  RankRuntime& m = rank(r);
  // Why take over: its worker opens a new stream only once its old one
  // broke, though this coordinator may not have noticed yet.
  m.attached = false;
  m.reattaching = true;
  m.resent_through = plans_.last_reported(r);
  return absl::OkStatus();
}

void Generation::Remember(PlanPtr plan) {
  recent_plans_.push_back(std::move(plan));
  while (recent_plans_.size() > static_cast<size_t>(3 * plans_.lookahead() + 1)) recent_plans_.pop_front();
}

std::vector<PlanPtr> Generation::RecentPlansFrom(int64_t iteration) const {
  std::vector<PlanPtr> out;
  for (const PlanPtr& p : recent_plans_) {
    if (p->iteration() >= iteration) out.push_back(p);
  }
  return out;
}

void Generation::Forgive(Clock::time_point now) {
  for (RankRuntime& m : ranks_) {
    if (m.state != v1::WORKER_TRAINING) continue;
    m.last_heard = now;
    m.last_activity = now;
  }
  last_plan_time_ = now;
}

absl::StatusOr<int> Generation::Sender(const StreamRef& stream, int named, const char* what) const {
  const int r = stream.host() ? named : stream.own_rank;
  if (r < 0 || r >= world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " names rank ", r, ", out of range for world size ", world_size()));
  }
  if (stream.generation != number_) return EndedGeneration(r, stream.generation);
  if (stream.sink == nullptr || rank(r).stream != stream.sink) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " names rank ", r, ", which is not one of this Train stream's ranks (hello.ranks)"));
  }
  return r;
}

std::vector<int> Generation::Detach(const StreamRef& stream, int only) {
  std::vector<int> gone;
  auto detach = [&](int r) {
    RankRuntime& m = rank(r);
    if (m.stream != stream.sink || !m.attached) return;
    m.attached = false;
    gone.push_back(r);
  };
  if (only >= 0 || !stream.host()) {
    const int r = only >= 0 ? only : stream.own_rank;
    if (r < world_size()) detach(r);
  } else {
    for (int r = 0; r < world_size(); ++r) detach(r);
  }
  return gone;
}

absl::Status Generation::Report(int r, const v1::Report& report, Clock::time_point now) {
  RankRuntime& m = rank(r);
  if (!m.attached || m.state != v1::WORKER_TRAINING) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", r, " is not training (", v1::WorkerState_Name(m.state), ")"));
  }
  const bool sent_again = report.iteration() >= 0 &&
                          ((resumed_ && plans_.last_reported(r) < 0 && report.iteration() < resumed_at_) ||
                           report.iteration() <= m.resent_through);
  if (sent_again) {
    return absl::OkStatus();  // sent again after a Resume: older than the plans resumed at, or recorded already
  }
  if (absl::Status st = plans_.Validate(r, report); !st.ok()) return st;
  plans_.Add(r, report, now);
  if (plans_.started() && last_plan_time_ == Clock::time_point{}) last_plan_time_ = now;
  m.last_iteration = report.iteration();
  m.last_step_ms = report.last_step_ms();
  m.last_loss = report.loss();
  m.last_tokens_per_s = report.tokens_per_s();
  m.last_activity = now;
  m.last_heard = now;
  m.last_report_unix_ms = NowUnixMs();
  return absl::OkStatus();
}

void Generation::Ended(const std::vector<int>& ranks, bool done, const std::string& reason) {
  for (int r : ranks) {
    RankRuntime& m = rank(r);
    m.state = done ? v1::WORKER_DONE : v1::WORKER_LOST;
    m.exit_reason = reason;
    m.attached = false;
  }
}

void Generation::Done(int r, const std::string& reason) {
  RankRuntime& m = rank(r);
  m.state = v1::WORKER_DONE;
  m.exit_reason = reason;
  m.attached = false;
  if (m.last_iteration < min_done_iteration_) {
    min_done_iteration_ = m.last_iteration;
    min_done_rank_ = r;
  }
}

std::string Generation::StepsMismatchAfterReport(int r) const {
  // Why: a rank that already finished will never report this iteration.
  const int64_t it = rank(r).last_iteration;
  if (it <= min_done_iteration_) return "";
  return absl::StrCat(RankName(min_done_rank_), " finished after iteration ", min_done_iteration_, " but ",
                      RankName(r), " reported iteration ", it, ": ranks ran different numbers of steps");
}

std::string Generation::StepsMismatchAfterDone(int r) const {
  // Why: another rank already reported an iteration this one never will.
  int other = -1;
  const int64_t max_reported = plans_.max_reported(&other);
  const int64_t last = rank(r).last_iteration;
  if (max_reported <= last) return "";
  return absl::StrCat(RankName(r), " finished after iteration ", last, " while ", RankName(other),
                      " reported iteration ", max_reported, ": ranks ran different numbers of steps");
}

void Generation::Heard(int r, int64_t iteration, Clock::time_point now) {
  RankRuntime& m = rank(r);
  if (m.state != v1::WORKER_TRAINING) return;  // finishing, or already lost
  m.last_heard = std::max(m.last_heard, now);
  m.heartbeat_iteration = iteration;
}

std::optional<LostVerdict> Generation::LostRank(Clock::time_point now) const {
  if (resumed_ && !rendezvous_.complete() && now - world_complete_time_ > cfg_.heartbeat_timeout) {
    // Why the heartbeat timeout: a live worker retries its stream at least
    // once a second, so one not back by then is gone.
    for (int r = 0; r < world_size(); ++r) {
      if (!rendezvous_.member(r).joined) {
        return LostVerdict{r, absl::StrCat("did not re-attach within ", DurationText(cfg_.heartbeat_timeout),
                                           " of the coordinator's restart")};
      }
    }
  }
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
  return JudgeLiveness(activity, params, now, world_complete_time_, std::max(last_plan_time_, world_complete_time_),
                       plans_.next_plan());
}

}  // namespace psync::server
