#include "server/pending_joins.h"

#include <utility>

namespace psync::server {
namespace {

// Takes `ticket`'s Join (Waiting or Queued) out of `joins`, its deadline cancelled.
template <typename Join>
std::optional<Join> Take(std::map<uint64_t, Join>& joins, uint64_t ticket, Scheduler* scheduler) {
  auto it = joins.find(ticket);
  if (it == joins.end()) return std::nullopt;
  Join j = std::move(it->second);
  joins.erase(it);
  scheduler->Cancel(j.timer);
  return j;
}

// Refuses every Join in `joins` with `st`.
template <typename Join>
void FailAll(std::map<uint64_t, Join>& joins, const absl::Status& st, Scheduler* scheduler, Outbox* out) {
  for (auto& [ticket, j] : joins) {
    scheduler->Cancel(j.timer);
    PendingJoins::Answer(std::move(j.done), st, out);
  }
  joins.clear();
}

}  // namespace

PendingJoins::PendingJoins(Scheduler* scheduler, std::function<void(uint64_t)> expire)
    : scheduler_(scheduler), expire_(std::move(expire)) {}

void PendingJoins::Wait(uint64_t ticket, int rank, const v1::JoinRequest& req, JoinDone done,
                        Clock::time_point deadline) {
  Waiting w;
  w.rank = rank;
  w.req = req;
  w.deadline = deadline;
  w.done = std::move(done);
  w.timer = scheduler_->RunAt(deadline, [expire = expire_, ticket] { expire(ticket); });
  waiting_.emplace(ticket, std::move(w));
}

void PendingJoins::Queue(uint64_t ticket, const v1::JoinRequest& req, JoinDone done, Clock::time_point deadline) {
  Queued q;
  q.ticket = ticket;
  q.req = req;
  q.done = std::move(done);
  q.deadline = deadline;
  q.timer = scheduler_->RunAt(deadline, [expire = expire_, ticket] { expire(ticket); });
  queued_.emplace(ticket, std::move(q));
}

std::optional<PendingJoins::Waiting> PendingJoins::TakeWaiting(uint64_t ticket) {
  return Take(waiting_, ticket, scheduler_);
}

std::optional<PendingJoins::Queued> PendingJoins::TakeQueued(uint64_t ticket) {
  return Take(queued_, ticket, scheduler_);
}

std::optional<PendingJoins::Queued> PendingJoins::TakeOldestQueued() {
  if (queued_.empty()) return std::nullopt;
  return TakeQueued(queued_.begin()->first);
}

void PendingJoins::QueueWaiting() {
  std::vector<uint64_t> tickets;
  for (const auto& [ticket, w] : waiting_) tickets.push_back(ticket);
  for (uint64_t ticket : tickets) {
    std::optional<Waiting> w = TakeWaiting(ticket);
    Queue(ticket, w->req, std::move(w->done), w->deadline);
  }
}

void PendingJoins::RenumberWaiting(const std::vector<int>& old_ranks) {
  std::map<int, int> to_new;
  for (size_t i = 0; i < old_ranks.size(); ++i) to_new[old_ranks[i]] = static_cast<int>(i);
  for (auto& [ticket, w] : waiting_) {
    auto it = to_new.find(w.rank);
    if (it != to_new.end()) w.rank = it->second;
  }
}

void PendingJoins::AnswerWaiting(std::shared_ptr<const SharedJoinResponse> shared, Outbox* out) {
  std::vector<Waiting> all;
  all.reserve(waiting_.size());
  for (auto& [ticket, w] : waiting_) {
    scheduler_->Cancel(w.timer);
    all.push_back(std::move(w));
  }
  waiting_.clear();
  out->Call([all = std::move(all), shared = std::move(shared)]() mutable {
    for (Waiting& w : all) w.done(JoinAnswer{w.rank, shared});
  });
}

std::vector<int> PendingJoins::FailWaiting(const absl::Status& st, Outbox* out) {
  std::vector<int> ranks;
  for (const auto& [ticket, w] : waiting_) ranks.push_back(w.rank);
  FailAll(waiting_, st, scheduler_, out);
  return ranks;
}

void PendingJoins::FailQueued(const absl::Status& st, Outbox* out) { FailAll(queued_, st, scheduler_, out); }

void PendingJoins::Answer(JoinDone done, absl::StatusOr<JoinAnswer> result, Outbox* out) {
  out->Call([done = std::move(done), result = std::move(result)] { done(result); });
}

}  // namespace psync::server
