#include "server/job_state.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/bucket_planner.h"
#include "server/limits.h"

namespace psync::server {
namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ShapeString(const v1::ParamSpec& p) {
  return absl::StrCat("[", absl::StrJoin(p.shape(), ", "), "]");
}

std::string ParamString(const v1::ParamSpec& p) {
  std::string s = absl::StrCat("'", p.name(), "' ", ShapeString(p));
  if (p.element_size() != 0 && p.element_size() != 4) absl::StrAppend(&s, " x", p.element_size(), "B");
  return s;
}

bool SameParam(const v1::ParamSpec& a, const v1::ParamSpec& b) {
  auto es = [](const v1::ParamSpec& p) { return p.element_size() ? p.element_size() : 4; };
  return a.name() == b.name() && es(a) == es(b) &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end());
}

std::string Seconds(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return absl::StrCat(ms.count() / 1000, "s");
  return absl::StrCat(ms.count(), "ms");
}

v1::BucketPlan MakePlan(int64_t id, int64_t applies_from, const std::vector<PackedBucket>& buckets) {
  v1::BucketPlan plan;
  plan.set_id(id);
  plan.set_applies_from_iteration(applies_from);
  for (const auto& b : buckets) {
    v1::Bucket* out = plan.add_buckets();
    for (int p : b.params) out->add_param_index(p);
    out->set_bytes(b.bytes);
  }
  return plan;
}

JobConfig Resolve(JobConfig c) {
  c.heartbeat_timeout = EffectiveHeartbeatTimeout(c);
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

JobState::JobState(JobConfig config)
    : cfg_(Resolve(std::move(config))),
      start_time_(Clock::now()),
      store_prefix_(absl::StrCat(cfg_.job_id, "/g1-",
                                 std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count(),
                                 "/")),
      members_(static_cast<size_t>(cfg_.world_size)),
      reported_(static_cast<size_t>(cfg_.world_size), false) {}

std::string JobState::RankNameLocked(int rank) const {
  const Member& m = members_[static_cast<size_t>(rank)];
  return absl::StrCat("rank ", rank, " (", m.hostname, ":", m.pid, ")");
}

absl::Status JobState::CheckCompatibleLocked(const v1::JoinRequest& req) const {
  const std::string first = absl::StrCat("the first worker's (rank ", reference_rank_, ")");
  if (req.backend() != backend_) {
    return absl::FailedPreconditionError(absl::StrCat("backend '", req.backend(), "' differs from ",
                                                      first, " '", backend_,
                                                      "': every rank must use the same backend"));
  }
  if (req.bucket_cap_bytes() != bucket_cap_ || req.first_bucket_cap_bytes() != first_bucket_cap_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "bucket caps (", req.bucket_cap_bytes(), " / first ", req.first_bucket_cap_bytes(),
        " bytes) differ from ", first, " (", bucket_cap_, " / first ", first_bucket_cap_,
        " bytes): pass the same --bucket-cap-mb and --first-bucket-mb to every rank"));
  }
  const int n = req.manifest_size();
  const int ref = static_cast<int>(manifest_.size());
  for (int i = 0; i < std::min(n, ref); ++i) {
    if (!SameParam(req.manifest(i), manifest_[static_cast<size_t>(i)])) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model differs from ", first, ": parameter ", i, " is ", ParamString(req.manifest(i)),
          " here but ", ParamString(manifest_[static_cast<size_t>(i)]),
          " there; every rank must build the same model"));
    }
  }
  if (n != ref) {
    const std::string extra = n > ref ? absl::StrCat("this worker has extra parameter ", ref, " ",
                                                     ParamString(req.manifest(ref)))
                                      : absl::StrCat("this worker lacks parameter ", n, " ",
                                                     ParamString(manifest_[static_cast<size_t>(n)]));
    return absl::FailedPreconditionError(absl::StrCat("model differs from ", first, ": ", n,
                                                      " parameters here, ", ref, " there; ", extra,
                                                      "; every rank must build the same model"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JoinResponse> JobState::Join(const v1::JoinRequest& req,
                                                const std::function<bool()>& cancelled) {
  absl::Status valid = ValidateJoinRequest(req);
  if (!valid.ok()) return valid;
  if (req.job_id() != cfg_.job_id) {
    return absl::FailedPreconditionError(absl::StrCat("job id '", req.job_id(),
                                                      "' does not match this coordinator's job '",
                                                      cfg_.job_id, "': check --job-id"));
  }
  if (req.world_size() != 0 && req.world_size() != cfg_.world_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker expects world size ", req.world_size(), " but the coordinator's job '",
                     cfg_.job_id, "' has world size ", cfg_.world_size));
  }
  std::unique_lock<std::mutex> l(mu_);
  switch (state_) {
    case v1::JOB_ABORTED:
      return absl::FailedPreconditionError(absl::StrCat(
          "job '", cfg_.job_id, "' was aborted (", reason_, "); start a new coordinator to run again"));
    case v1::JOB_FINISHED:
      return absl::FailedPreconditionError(absl::StrCat("job '", cfg_.job_id,
                                                        "' has finished; start a new coordinator"));
    case v1::JOB_RUNNING:
    case v1::JOB_STOPPING:
      return absl::ResourceExhaustedError(absl::StrCat("world is full: all ", cfg_.world_size,
                                                       " ranks of job '", cfg_.job_id,
                                                       "' joined and it is running"));
    default:
      break;
  }
  if (have_reference_) {
    absl::Status st = CheckCompatibleLocked(req);
    if (!st.ok()) return st;
  }
  int rank = req.requested_rank();
  if (rank >= 0) {
    if (rank >= cfg_.world_size) {
      return absl::InvalidArgumentError(absl::StrCat("requested rank ", rank,
                                                     " is out of range for world size ",
                                                     cfg_.world_size));
    }
    if (members_[static_cast<size_t>(rank)].joined) {
      return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " is already taken by ",
                                                   RankNameLocked(rank),
                                                   ": give each worker a distinct RANK"));
    }
  } else {
    for (int r = 0; r < cfg_.world_size; ++r) {
      if (!members_[static_cast<size_t>(r)].joined) {
        rank = r;
        break;
      }
    }
    if (rank < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("world is full: all ", cfg_.world_size, " ranks are taken"));
    }
  }
  if (!have_reference_) {
    have_reference_ = true;
    reference_rank_ = rank;
    manifest_.assign(req.manifest().begin(), req.manifest().end());
    param_bytes_.clear();
    for (const auto& p : manifest_) param_bytes_.push_back(ParamBytes(p));
    backend_ = req.backend();
    bucket_cap_ = req.bucket_cap_bytes();
    first_bucket_cap_ = req.first_bucket_cap_bytes();
    current_plan_ = MakePlan(0, 0,
                             PackBuckets(ReverseManifestOrder(static_cast<int>(manifest_.size())),
                                         param_bytes_, first_bucket_cap_, bucket_cap_));
    used_or_.assign(static_cast<size_t>(BitmapBytes(static_cast<int64_t>(manifest_.size()))), '\0');
  }
  Member& m = members_[static_cast<size_t>(rank)];
  m = Member{};
  m.joined = true;
  m.hostname = req.hostname();
  m.device = req.device();
  m.pid = req.pid();
  m.state = v1::WORKER_JOINED;
  ++joined_;
  events_.Append(v1::EVENT_JOINED, rank, -1,
                 absl::StrCat(RankNameLocked(rank), " joined (", joined_, "/", cfg_.world_size, ")"));
  if (joined_ == cfg_.world_size) {
    state_ = v1::JOB_RUNNING;
    world_complete_time_ = Clock::now();
    events_.Append(v1::EVENT_WORLD_COMPLETE, -1, -1,
                   absl::StrCat("world complete: ", cfg_.world_size, " ranks"));
    join_cv_.notify_all();
  }
  const auto deadline = Clock::now() + cfg_.join_timeout;
  while (state_ == v1::JOB_WAITING) {
    if (cancelled && cancelled()) break;
    if (Clock::now() >= deadline) break;
    join_cv_.wait_for(l, std::chrono::milliseconds(100));
  }
  if (state_ == v1::JOB_WAITING) {
    const bool was_cancelled = cancelled && cancelled();
    std::vector<int> present, missing;
    for (int r = 0; r < cfg_.world_size; ++r) {
      (members_[static_cast<size_t>(r)].joined ? present : missing).push_back(r);
    }
    m = Member{};
    --joined_;
    if (joined_ == 0) have_reference_ = false;
    if (was_cancelled) {
      return absl::CancelledError(absl::StrCat("join of rank ", rank, " cancelled by the worker"));
    }
    if (missing.size() > 16) missing.resize(16);
    return absl::DeadlineExceededError(absl::StrCat(
        "world incomplete after ", Seconds(cfg_.join_timeout), ": ", present.size(), " of ",
        cfg_.world_size, " ranks joined; still missing ranks ", absl::StrJoin(missing, ","),
        " (start the remaining workers, or raise --join-timeout)"));
  }
  if (state_ == v1::JOB_ABORTED || state_ == v1::JOB_FINISHED) {
    return absl::FailedPreconditionError(absl::StrCat("job '", cfg_.job_id, "' ended during rendezvous: ",
                                                      reason_.empty() ? "shut down" : reason_));
  }
  v1::JoinResponse resp;
  resp.set_rank(rank);
  resp.set_world_size(cfg_.world_size);
  resp.set_generation(generation_);
  resp.set_store_prefix(store_prefix_);
  *resp.mutable_initial_bucket_plan() = current_plan_.id() == 0 ? current_plan_ : v1::BucketPlan();
  resp.set_job_id(cfg_.job_id);
  resp.set_heartbeat_interval_ms(HeartbeatInterval(cfg_).count());
  return resp;
}

absl::StatusOr<std::shared_ptr<PlanMailbox>> JobState::Attach(const v1::Hello& hello) {
  std::lock_guard<std::mutex> l(mu_);
  if (hello.job_id() != cfg_.job_id) {
    return absl::FailedPreconditionError(absl::StrCat("job id '", hello.job_id(),
                                                      "' does not match this coordinator's job '",
                                                      cfg_.job_id, "'"));
  }
  const int rank = hello.rank();
  if (rank < 0 || rank >= cfg_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("hello.rank ", rank, " is out of range for world size ",
                                                   cfg_.world_size));
  }
  if (hello.generation() != generation_) {
    return absl::FailedPreconditionError(absl::StrCat("hello.generation ", hello.generation(),
                                                      " is not the job's generation ", generation_,
                                                      ": Join again"));
  }
  if (state_ == v1::JOB_ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", reason_));
  if (state_ == v1::JOB_FINISHED) return absl::FailedPreconditionError("job has finished");
  Member& m = members_[static_cast<size_t>(rank)];
  if (state_ == v1::JOB_WAITING || !m.joined) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " has not completed Join: open the Train stream after Join returns"));
  }
  if (m.attached) {
    return absl::AlreadyExistsError(absl::StrCat(RankNameLocked(rank), " already has a Train stream"));
  }
  if (m.state != v1::WORKER_JOINED) {
    return absl::FailedPreconditionError(
        absl::StrCat(RankNameLocked(rank), " is ", v1::WorkerState_Name(m.state),
                     "; a rank gets one Train stream per job"));
  }
  m.attached = true;
  m.state = v1::WORKER_TRAINING;
  m.last_activity = Clock::now();
  m.last_heard = m.last_activity;
  m.mailbox = std::make_shared<PlanMailbox>();
  return m.mailbox;
}

absl::Status JobState::Report(int rank, const v1::Report& r) {
  std::lock_guard<std::mutex> l(mu_);
  if (state_ == v1::JOB_ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", reason_));
  if (rank < 0 || rank >= cfg_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("unknown rank ", rank));
  }
  Member& m = members_[static_cast<size_t>(rank)];
  if (!m.attached || m.state != v1::WORKER_TRAINING) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", rank, " is not training (",
                                                      v1::WorkerState_Name(m.state), ")"));
  }
  const int64_t P = static_cast<int64_t>(manifest_.size());
  if (static_cast<int64_t>(r.used_bitmap().size()) != BitmapBytes(P)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "report for iteration ", r.iteration(), ": used_bitmap is ", r.used_bitmap().size(),
        " bytes but the model has ", P, " parameters, so it must be ", BitmapBytes(P),
        " bytes (one bit per parameter, manifest order)"));
  }
  if (StopPlanSentLocked()) {
    return absl::FailedPreconditionError(absl::StrCat("report for iteration ", r.iteration(),
                                                      " after the job stopped after iteration ",
                                                      stop_after_));
  }
  if (started_ && r.iteration() != next_plan_iter_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "report from rank ", rank, " for iteration ", r.iteration(), " but the current iteration is ",
        next_plan_iter_,
        r.iteration() < next_plan_iter_ ? " (an old iteration)"
                                         : " (a future one: wait for the plan of the current iteration)"));
  }
  if (started_ && reported_[static_cast<size_t>(rank)]) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " already reported iteration ", r.iteration()));
  }
  if (r.iteration() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("report iteration ", r.iteration(), " is negative"));
  }
  if (!std::isfinite(r.last_step_ms()) || r.last_step_ms() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("last_step_ms ", r.last_step_ms(), " is not a valid time"));
  }
  if (r.ready_order_size() > 0) {
    if (rank != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ready_order sent by rank ", rank, "; only rank 0 sends it"));
    }
    if (have_ready_order_) {
      return absl::InvalidArgumentError("ready_order was already sent once");
    }
    std::vector<int> order(r.ready_order().begin(), r.ready_order().end());
    absl::StatusOr<std::vector<int>> full = CompleteReadyOrder(order, static_cast<int>(P));
    if (!full.ok()) return full.status();
    have_ready_order_ = true;
    pending_bucket_plan_ = true;
    next_bucket_plan_ = MakePlan(1, r.iteration() + 1,
                                 PackBuckets(*full, param_bytes_, first_bucket_cap_, bucket_cap_));
  }
  for (size_t b = 0; b < used_or_.size(); ++b) used_or_[b] |= r.used_bitmap()[b];
  if (!started_) {
    started_ = true;
    next_plan_iter_ = r.iteration();
    last_plan_time_ = Clock::now();
    if (stop_after_ == kStopAtFirst) stop_after_ = next_plan_iter_;
  }
  reported_[static_cast<size_t>(rank)] = true;
  ++reports_;
  m.last_iteration = r.iteration();
  m.last_step_ms = r.last_step_ms();
  m.last_loss = r.loss();
  m.last_activity = Clock::now();
  m.last_heard = m.last_activity;
  m.last_report_unix_ms = NowUnixMs();
  // A rank that already finished can never report this iteration.
  for (int q = 0; q < cfg_.world_size; ++q) {
    const Member& o = members_[static_cast<size_t>(q)];
    if (o.state == v1::WORKER_DONE) {
      AbortLocked(absl::StrCat(RankNameLocked(q), " finished after iteration ", o.last_iteration,
                               " but ", RankNameLocked(rank), " reported iteration ", r.iteration(),
                               ": ranks ran different numbers of steps"));
      return absl::OkStatus();
    }
  }
  if (reports_ == cfg_.world_size) EmitPlanLocked();
  return absl::OkStatus();
}

void JobState::EmitPlanLocked() {
  const int64_t P = static_cast<int64_t>(manifest_.size());
  v1::Plan plan;
  plan.set_iteration(next_plan_iter_);
  std::string unused(used_or_.size(), '\0');
  for (size_t b = 0; b < used_or_.size(); ++b) unused[b] = static_cast<char>(~used_or_[b]);
  if (P % 8 != 0) unused.back() = static_cast<char>(unused.back() & ((1u << (P % 8)) - 1));
  plan.set_globally_unused(unused);
  if (pending_bucket_plan_) {
    *plan.mutable_bucket_plan() = next_bucket_plan_;
    current_plan_ = next_bucket_plan_;
    pending_bucket_plan_ = false;
    events_.Append(v1::EVENT_PLAN_APPLIED, -1, next_bucket_plan_.applies_from_iteration(),
                   absl::StrCat("bucket plan ", next_bucket_plan_.id(), " (",
                                next_bucket_plan_.buckets_size(),
                                " buckets, from rank 0's ready order) applies from iteration ",
                                next_bucket_plan_.applies_from_iteration()));
  }
  if (stop_after_ == next_plan_iter_) {
    plan.set_action(v1::STOP_AFTER);
    plan.set_reason(stop_reason_);
  } else {
    plan.set_action(v1::CONTINUE);
  }
  BroadcastLocked(plan);
  last_plan_iter_ = next_plan_iter_;
  last_unused_ = std::move(unused);
  ++next_plan_iter_;
  reports_ = 0;
  std::fill(reported_.begin(), reported_.end(), false);
  std::fill(used_or_.begin(), used_or_.end(), '\0');
  last_plan_time_ = Clock::now();
}

void JobState::BroadcastLocked(const v1::Plan& plan) {
  for (auto& m : members_) {
    if (m.mailbox && m.state == v1::WORKER_TRAINING) m.mailbox->Push(plan);
  }
}

bool JobState::StopPlanSentLocked() const {
  return stop_after_ >= 0 && last_plan_iter_ >= stop_after_;
}

void JobState::AbortLocked(const std::string& reason) {
  if (state_ == v1::JOB_ABORTED || state_ == v1::JOB_FINISHED) return;
  state_ = v1::JOB_ABORTED;
  reason_ = reason;
  v1::Plan plan;
  plan.set_iteration(next_plan_iter_);
  plan.set_action(v1::ABORT);
  plan.set_reason(reason);
  BroadcastLocked(plan);
  for (auto& m : members_) {
    if (m.mailbox) m.mailbox->Close();
  }
  events_.Append(v1::EVENT_ABORTED, -1, next_plan_iter_, absl::StrCat("job aborted: ", reason));
  join_cv_.notify_all();
}

void JobState::MarkLostLocked(int rank, const std::string& why) {
  Member& m = members_[static_cast<size_t>(rank)];
  if (m.state == v1::WORKER_LOST || m.state == v1::WORKER_DONE) return;
  m.state = v1::WORKER_LOST;
  const std::string msg = absl::StrCat(RankNameLocked(rank), " lost: ", why);
  m.exit_reason = msg;
  if (m.mailbox) {
    // Tell the rank itself too, in case its stream still works (e.g. it was
    // blamed for a missing report): it stops instead of waiting.
    v1::Plan plan;
    plan.set_iteration(next_plan_iter_);
    plan.set_action(v1::ABORT);
    plan.set_reason(absl::StrCat("this rank was declared lost: ", msg));
    m.mailbox->Push(plan);
    m.mailbox->Close();
  }
  events_.Append(v1::EVENT_LOST, rank, next_plan_iter_, msg);
  AbortLocked(msg);
}

void JobState::MaybeFinishLocked() {
  if (state_ != v1::JOB_RUNNING && state_ != v1::JOB_STOPPING) return;
  for (const auto& m : members_) {
    if (m.state != v1::WORKER_DONE) return;
  }
  state_ = v1::JOB_FINISHED;
  events_.Append(v1::EVENT_FINISHED, -1, last_plan_iter_,
                 absl::StrCat("job finished after iteration ", last_plan_iter_));
}

absl::Status JobState::Done(int rank, const v1::Done& done) {
  std::lock_guard<std::mutex> l(mu_);
  if (rank < 0 || rank >= cfg_.world_size) return absl::InvalidArgumentError("unknown rank");
  Member& m = members_[static_cast<size_t>(rank)];
  if (m.state != v1::WORKER_TRAINING) {
    return absl::FailedPreconditionError(absl::StrCat("Done from rank ", rank, " which is ",
                                                      v1::WorkerState_Name(m.state)));
  }
  std::string reason = done.exit_reason().substr(0, kMaxStringBytes);
  if (done.exit_code() != 0 && (state_ == v1::JOB_RUNNING || state_ == v1::JOB_STOPPING)) {
    MarkLostLocked(rank, absl::StrCat("failed (exit code ", done.exit_code(), "): ", reason));
    return absl::OkStatus();
  }
  m.state = v1::WORKER_DONE;
  m.exit_reason = reason;
  m.attached = false;
  if (m.mailbox) m.mailbox->Close();
  events_.Append(v1::EVENT_DONE, rank, m.last_iteration,
                 absl::StrCat(RankNameLocked(rank), " done: ", reason));
  // Others already reported an iteration this rank will never report.
  if (reports_ > 0 && state_ != v1::JOB_ABORTED) {
    AbortLocked(absl::StrCat(RankNameLocked(rank), " finished after iteration ", m.last_iteration,
                             " while other ranks reported iteration ", next_plan_iter_,
                             ": ranks ran different numbers of steps"));
    return absl::OkStatus();
  }
  MaybeFinishLocked();
  return absl::OkStatus();
}

absl::Status JobState::Heartbeat(int rank, const v1::Heartbeat& hb, Clock::time_point now) {
  std::lock_guard<std::mutex> l(mu_);
  if (rank < 0 || rank >= cfg_.world_size) return absl::InvalidArgumentError("unknown rank");
  if (hb.rank() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("heartbeat names rank ", hb.rank(),
                                                   " on the Train stream of rank ", rank));
  }
  Member& m = members_[static_cast<size_t>(rank)];
  if (m.state != v1::WORKER_TRAINING) return absl::OkStatus();  // finishing, or already lost
  m.last_heard = std::max(m.last_heard, now);
  m.heartbeat_iteration = hb.iteration();
  return absl::OkStatus();
}

void JobState::StreamClosed(int rank, const std::string& cause) {
  std::lock_guard<std::mutex> l(mu_);
  if (rank < 0 || rank >= cfg_.world_size) return;
  Member& m = members_[static_cast<size_t>(rank)];
  m.attached = false;
  if (m.mailbox) m.mailbox->Close();
  if (m.state != v1::WORKER_TRAINING) return;  // Done, or already lost
  if (state_ == v1::JOB_ABORTED || state_ == v1::JOB_FINISHED) {
    m.state = v1::WORKER_DONE;
    m.exit_reason = absl::StrCat("disconnected after the job ended: ", cause);
    return;
  }
  if (StopPlanSentLocked()) {
    m.state = v1::WORKER_DONE;
    m.exit_reason = absl::StrCat("disconnected after the stop plan: ", cause);
    MaybeFinishLocked();
    return;
  }
  MarkLostLocked(rank, cause);
}

void JobState::CheckLiveness(Clock::time_point now) {
  std::lock_guard<std::mutex> l(mu_);
  if (state_ != v1::JOB_RUNNING && state_ != v1::JOB_STOPPING) return;
  if (StopPlanSentLocked()) return;  // ranks are finishing; nothing more is expected
  for (int r = 0; r < cfg_.world_size; ++r) {
    const Member& m = members_[static_cast<size_t>(r)];
    if (m.state == v1::WORKER_JOINED && now - world_complete_time_ > cfg_.report_timeout) {
      MarkLostLocked(r, absl::StrCat("no Train stream within ", Seconds(cfg_.report_timeout),
                                     " of the world completing"));
      return;
    }
  }
  // Rule 1 (see job_state.h): the TRAINING rank silent longest, if beyond heartbeat_timeout.
  int silent = -1;
  bool quiet = false;
  const auto quiet_after = 2 * HeartbeatInterval(cfg_);  // two heartbeats missed
  for (int r = 0; r < cfg_.world_size; ++r) {
    const Member& m = members_[static_cast<size_t>(r)];
    if (m.state != v1::WORKER_TRAINING) continue;
    const auto unheard = now - m.last_heard;
    if (unheard > quiet_after) quiet = true;
    if (unheard > cfg_.heartbeat_timeout &&
        (silent < 0 || m.last_heard < members_[static_cast<size_t>(silent)].last_heard)) {
      silent = r;
    }
  }
  if (silent >= 0) {
    const auto unheard = std::chrono::duration_cast<std::chrono::milliseconds>(
        now - members_[static_cast<size_t>(silent)].last_heard);
    MarkLostLocked(silent, absl::StrCat("no message (heartbeat or report) for ", Seconds(unheard),
                                        ", beyond the heartbeat timeout of ",
                                        Seconds(cfg_.heartbeat_timeout),
                                        " (process or connection gone) at iteration ", next_plan_iter_));
    return;
  }
  // Rule 2: report deadline, only while no rank is quiet (a quiet rank is the
  // likelier cause of a stall: it becomes silent, or is heard again, within
  // heartbeat_timeout).
  if (quiet) return;
  for (int r = 0; r < cfg_.world_size; ++r) {
    const Member& m = members_[static_cast<size_t>(r)];
    if (m.state != v1::WORKER_TRAINING) continue;
    if (reported_[static_cast<size_t>(r)]) continue;  // waiting for the others
    const auto since = std::max(m.last_activity, last_plan_time_);
    if (now - since > cfg_.report_timeout) {
      MarkLostLocked(r, absl::StrCat("no report for iteration ", next_plan_iter_, " within ",
                                     Seconds(cfg_.report_timeout), " (still heartbeating)"));
      return;
    }
  }
}

v1::ShutdownResponse JobState::Shutdown(const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  v1::ShutdownResponse resp;
  const std::string why = reason.empty() ? "shutdown requested" : reason.substr(0, kMaxStringBytes);
  switch (state_) {
    case v1::JOB_WAITING:
      state_ = v1::JOB_FINISHED;
      reason_ = absl::StrCat(why, " before the world was complete");
      events_.Append(v1::EVENT_FINISHED, -1, -1, reason_);
      join_cv_.notify_all();
      resp.set_stop_after_iteration(-1);
      break;
    case v1::JOB_RUNNING:
      state_ = v1::JOB_STOPPING;
      stop_reason_ = why;
      reason_ = why;
      stop_after_ = started_ ? next_plan_iter_ : kStopAtFirst;
      resp.set_stop_after_iteration(next_plan_iter_);
      events_.Append(v1::EVENT_STOPPING, -1, next_plan_iter_,
                     absl::StrCat(why, ": every rank stops after iteration ",
                                  started_ ? absl::StrCat(next_plan_iter_) : std::string("(first)")));
      break;
    default:
      resp.set_already_stopping(state_ == v1::JOB_STOPPING);
      resp.set_stop_after_iteration(stop_after_ >= 0 ? stop_after_ : next_plan_iter_);
      break;
  }
  resp.set_state(state_);
  return resp;
}

void JobState::Abort(const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  AbortLocked(reason);
}

v1::JobState JobState::state() const {
  std::lock_guard<std::mutex> l(mu_);
  return state_;
}

bool JobState::Ended() const {
  std::lock_guard<std::mutex> l(mu_);
  return state_ == v1::JOB_FINISHED || state_ == v1::JOB_ABORTED;
}

namespace {
void FillWorker(int rank, const std::string& host, int64_t pid, const std::string& device,
                v1::WorkerState state, int64_t iter, double step, double loss, const std::string& exit,
                int64_t last_ms, v1::WorkerInfo* w) {
  w->set_rank(rank);
  w->set_hostname(host);
  w->set_pid(pid);
  w->set_device(device);
  w->set_state(state);
  w->set_last_iteration(iter);
  w->set_last_step_ms(step);
  w->set_last_loss(loss);
  w->set_exit_reason(exit);
  w->set_last_report_unix_ms(last_ms);
}
}  // namespace

void JobState::FillWorkers(v1::WorkersResponse* out) const {
  std::lock_guard<std::mutex> l(mu_);
  for (int r = 0; r < cfg_.world_size; ++r) {
    const Member& m = members_[static_cast<size_t>(r)];
    if (!m.joined) continue;
    FillWorker(r, m.hostname, m.pid, m.device, m.state, m.last_iteration, m.last_step_ms, m.last_loss,
               m.exit_reason, m.last_report_unix_ms, out->add_workers());
  }
}

void JobState::FillStatus(v1::StatusResponse* out) const {
  std::lock_guard<std::mutex> l(mu_);
  out->set_job_id(cfg_.job_id);
  out->set_world_size(cfg_.world_size);
  out->set_joined(joined_);
  out->set_generation(generation_);
  out->set_state(state_);
  out->set_reason(reason_);
  out->set_iteration(last_plan_iter_);
  out->set_stop_after_iteration(stop_after_ >= 0 ? stop_after_ : (stop_after_ == kStopAtFirst ? 0 : -1));
  out->set_backend(backend_);
  out->set_uptime_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_time_).count());
  std::vector<double> steps;
  int slowest = -1;
  double slowest_ms = 0;
  for (int r = 0; r < cfg_.world_size; ++r) {
    const Member& m = members_[static_cast<size_t>(r)];
    if (!m.joined) continue;
    FillWorker(r, m.hostname, m.pid, m.device, m.state, m.last_iteration, m.last_step_ms, m.last_loss,
               m.exit_reason, m.last_report_unix_ms, out->add_workers());
    if (m.last_step_ms > 0) {
      steps.push_back(m.last_step_ms);
      if (m.last_step_ms > slowest_ms) {
        slowest_ms = m.last_step_ms;
        slowest = r;
      }
    }
  }
  out->set_slowest_rank(slowest);
  if (!steps.empty()) {
    std::sort(steps.begin(), steps.end());
    const size_t n = steps.size();
    const double median = n % 2 ? steps[n / 2] : 0.5 * (steps[n / 2 - 1] + steps[n / 2]);
    out->set_slowest_step_ms(slowest_ms);
    out->set_median_step_ms(median);
    out->set_slowest_vs_median_pct(median > 0 ? (slowest_ms - median) / median * 100.0 : 0.0);
  }
}

void JobState::FillBuckets(v1::BucketsResponse* out) const {
  std::lock_guard<std::mutex> l(mu_);
  if (!have_reference_) return;
  *out->mutable_plan() = current_plan_;
  for (const auto& p : manifest_) out->add_param_names(p.name());
  out->set_bucket_cap_bytes(bucket_cap_);
  out->set_first_bucket_cap_bytes(first_bucket_cap_);
}

void JobState::FillUnused(v1::UnusedResponse* out) const {
  std::lock_guard<std::mutex> l(mu_);
  out->set_iteration(last_plan_iter_);
  out->set_num_params(static_cast<int>(manifest_.size()));
  if (last_plan_iter_ < 0) return;
  for (int64_t i = 0; i < static_cast<int64_t>(manifest_.size()); ++i) {
    if (BitmapGet(last_unused_, i)) {
      out->add_param_index(static_cast<int>(i));
      out->add_param_names(manifest_[static_cast<size_t>(i)].name());
    }
  }
}

}  // namespace psync::server
