#include "client/relay/host_batcher.h"

#include <algorithm>
#include <utility>

namespace psync::relay {

std::shared_ptr<HostBatcher> HostBatcher::Create(const BatcherOptions& opt, Scheduler* scheduler) {
  return std::shared_ptr<HostBatcher>(new HostBatcher(opt, scheduler));
}

HostBatcher::HostBatcher(const BatcherOptions& opt, Scheduler* scheduler) : opt_(opt), scheduler_(scheduler) {}

bool HostBatcher::Add(int rank, std::shared_ptr<LocalSink> sink) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (phase_ != Phase::kForming) return false;
    members_[rank] = Member{std::move(sink), true};
    if (form_timer_ == 0) {
      // The first hello: forming ends form_wait from now at the latest. Why
      // a weak pointer: the deadline may fire after the relay let go of
      // this batcher; then there is nothing left to do.
      std::weak_ptr<HostBatcher> self = weak_from_this();
      form_timer_ = scheduler_->RunAt(scheduler_->Now() + opt_.form_wait, [self] {
        if (auto b = self.lock()) b->OnFormDeadline();
      });
    }
    // Why now: every expected local rank said hello; the host stream
    // carries exactly these ranks.
    if (opt_.expect_ranks > 0 && static_cast<int>(members_.size()) >= opt_.expect_ranks) FormLocked();
  }
  Wake();
  return true;
}

bool HostBatcher::HasRank(int rank) const {
  std::lock_guard<std::mutex> l(mu_);
  return phase_ != Phase::kEnded && members_.count(rank) > 0;
}

int HostBatcher::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return phase_ == Phase::kEnded ? 0 : static_cast<int>(members_.size());
}

bool HostBatcher::ended() const {
  std::lock_guard<std::mutex> l(mu_);
  return phase_ == Phase::kEnded;
}

void HostBatcher::OnFormDeadline() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (phase_ == Phase::kForming) FormLocked();
  }
  Wake();
}

void HostBatcher::FormLocked() {
  if (form_timer_ != 0) scheduler_->Cancel(form_timer_);
  form_timer_ = 0;
  if (members_.empty()) {
    // Every rank that said hello went away while forming: nothing to open.
    EndLocked(absl::UnavailableError("psync-relay is shutting down"));
    return;
  }
  phase_ = Phase::kOpen;
  FlushLocked(/*force=*/false);
  ArmHoldLocked();
}

void HostBatcher::Report(int rank, v1::Report report) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (phase_ == Phase::kEnded) return;
    report.set_rank(rank);
    auto [it, fresh] = held_.try_emplace(report.iteration());
    if (fresh) it->second.first = scheduler_->Now();
    it->second.by_rank[rank] = std::move(report);
    FlushLocked(/*force=*/false);
    ArmHoldLocked();
  }
  Wake();
}

void HostBatcher::Heartbeat(const v1::Heartbeat& heartbeat) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (phase_ == Phase::kEnded) return;
    UpMessage m;
    *m.up.mutable_heartbeat() = heartbeat;
    out_.push_back(std::move(m));
  }
  Wake();
}

void HostBatcher::Done(int rank, v1::Done done) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (phase_ == Phase::kEnded) return;
    FlushLocked(/*force=*/true);
    done.set_rank(rank);
    UpMessage m;
    *m.up.mutable_done() = std::move(done);
    m.end_rank = rank;
    out_.push_back(std::move(m));
    if (auto it = members_.find(rank); it != members_.end()) it->second.live = false;
    ArmHoldLocked();
  }
  Wake();
}

void HostBatcher::Gone(int rank, const std::string& cause) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = members_.find(rank);
    if (it == members_.end() || !it->second.live) return;
    it->second.live = false;
    it->second.sink.reset();
    if (phase_ == Phase::kForming) {
      // Why: not announced upstream yet; the coordinator blames the rank
      // for never attaching, as it would without the relay. Its held
      // reports go too: the host stream will not name it.
      members_.erase(it);
      for (auto h = held_.begin(); h != held_.end();) {
        h->second.by_rank.erase(rank);
        h = h->second.by_rank.empty() ? held_.erase(h) : std::next(h);
      }
      return;
    }
    // Why not after an ABORT of every rank: the generation is over and the
    // coordinator expects nothing more of it.
    if (all_aborted_ || phase_ == Phase::kEnded) return;
    FlushLocked(/*force=*/true);
    UpMessage m;
    m.up.mutable_rank_closed()->set_rank(rank);
    m.up.mutable_rank_closed()->set_cause(cause);
    out_.push_back(std::move(m));
    ArmHoldLocked();
  }
  Wake();
}

void HostBatcher::FlushLocked(bool force) {
  if (phase_ == Phase::kEnded || (phase_ == Phase::kForming && !force)) return;
  const Clock::time_point now = scheduler_->Now();
  while (!held_.empty()) {
    auto it = held_.begin();
    const bool complete = std::all_of(members_.begin(), members_.end(), [&](const auto& m) {
      return !m.second.live || it->second.by_rank.count(m.first) > 0;
    });
    if (!complete && !force && now < it->second.first + opt_.max_hold) break;
    UpMessage m;
    for (auto& [rank, r] : it->second.by_rank) *m.up.mutable_report_batch()->add_reports() = std::move(r);
    out_.push_back(std::move(m));
    held_.erase(it);
  }
}

void HostBatcher::ArmHoldLocked() {
  const bool want = phase_ == Phase::kOpen && !held_.empty();
  const Clock::time_point at = want ? held_.begin()->second.first + opt_.max_hold : Clock::time_point{};
  if (hold_timer_ != 0 && want && at == hold_at_) return;
  if (hold_timer_ != 0) scheduler_->Cancel(hold_timer_);
  hold_timer_ = 0;
  if (!want) return;
  const uint64_t seq = ++hold_seq_;
  std::weak_ptr<HostBatcher> self = weak_from_this();
  hold_at_ = at;
  hold_timer_ = scheduler_->RunAt(at, [self, seq] {
    if (auto b = self.lock()) b->OnHoldDeadline(seq);
  });
}

void HostBatcher::OnHoldDeadline(uint64_t seq) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (seq != hold_seq_) return;  // re-armed or cancelled meanwhile
    hold_timer_ = 0;
    FlushLocked(/*force=*/false);
    ArmHoldLocked();
  }
  Wake();
}

SendStep HostBatcher::Next() {
  std::lock_guard<std::mutex> l(mu_);
  return NextLocked();
}

SendStep HostBatcher::WaitNext() {
  std::unique_lock<std::mutex> l(mu_);
  SendStep step;
  cv_.wait(l, [&] {
    step = NextLocked();
    return step.kind != SendStep::kWait;
  });
  return step;
}

SendStep HostBatcher::NextLocked() {
  SendStep s;
  if (phase_ == Phase::kForming) return s;
  if (stopping_ || phase_ == Phase::kEnded) {
    s.kind = SendStep::kStop;
  } else if (!announced_) {
    announced_ = true;
    s.kind = SendStep::kOpen;
    for (const auto& [rank, m] : members_) s.ranks.push_back(rank);
  } else if (!out_.empty()) {
    s.kind = SendStep::kSend;
    s.messages.swap(out_);
  } else if (!AnyLiveLocked() && held_.empty()) {
    // Why: every local rank is done or gone; the coordinator ends the host
    // stream once it has seen the half-close.
    s.kind = SendStep::kHalfClose;
  }
  return s;
}

bool HostBatcher::AnyLiveLocked() const {
  return std::any_of(members_.begin(), members_.end(), [](const auto& m) { return m.second.live; });
}

void HostBatcher::DoneWritten(int rank) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = members_.find(rank); it != members_.end() && it->second.sink) {
    it->second.sink->End(absl::OkStatus());
    it->second.sink.reset();
  }
}

std::vector<std::shared_ptr<LocalSink>> HostBatcher::Recipients(const v1::Plan& plan) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::shared_ptr<LocalSink>> to;
  for (const auto& [rank, m] : members_) {
    if (!m.sink) continue;
    if (plan.ranks_size() > 0 && std::find(plan.ranks().begin(), plan.ranks().end(), rank) == plan.ranks().end()) {
      continue;
    }
    to.push_back(m.sink);
  }
  if (plan.action() == v1::ABORT && plan.ranks_size() == 0) all_aborted_ = true;
  return to;
}

void HostBatcher::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  Wake();
}

void HostBatcher::Cancel() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    // Why end here before the stream opened: no reader will end them.
    if (!announced_) EndLocked(absl::UnavailableError("psync-relay is shutting down"));
  }
  Wake();
}

void HostBatcher::End(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> l(mu_);
    EndLocked(status);
  }
  Wake();
}

void HostBatcher::EndLocked(const absl::Status& status) {
  phase_ = Phase::kEnded;
  for (auto& [rank, m] : members_) {
    if (m.sink) m.sink->End(status);
    m.sink.reset();
    m.live = false;
  }
  for (uint64_t* t : {&form_timer_, &hold_timer_}) {
    if (*t != 0) scheduler_->Cancel(*t);
    *t = 0;
  }
}

}  // namespace psync::relay
