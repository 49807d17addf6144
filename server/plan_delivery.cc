#include "server/plan_delivery.h"

namespace psync::server {

PlanDelivery::PlanDelivery(int world_size, std::chrono::milliseconds test_only_delay, Scheduler* scheduler,
                           FlushRunner* runner, std::function<void()> due)
    : delay_(test_only_delay),
      scheduler_(scheduler),
      runner_(runner),
      due_(std::move(due)),
      bindings_(static_cast<size_t>(world_size)) {}

void PlanDelivery::Bind(const std::vector<int>& ranks, std::shared_ptr<PlanSink> sink) {
  auto b = std::make_shared<Binding>();
  b->sink = std::move(sink);
  b->ranks = static_cast<int>(ranks.size());
  for (int r : ranks) bindings_[static_cast<size_t>(r)] = b;
}

void PlanDelivery::Release(int rank) {
  std::shared_ptr<Binding>& b = bindings_[static_cast<size_t>(rank)];
  if (!b) return;
  // Why: a host stream still carries its other ranks; it closes with its last.
  if (--b->ranks <= 0) b->sink->Close();
  b.reset();
}

void PlanDelivery::ReleaseAll() {
  for (size_t r = 0; r < bindings_.size(); ++r) Release(static_cast<int>(r));
  held_.clear();
}

void PlanDelivery::Broadcast(PlanPtr plan, Outbox* out) {
  if (delay_.count() > 0) {
    // Why (test only): hold the plan back to simulate a slow coordinator.
    const auto at = scheduler_->Now() + delay_;
    held_.emplace_back(at, std::move(plan));
    scheduler_->RunAt(at, due_);
    return;
  }
  BroadcastNow(plan, out);
}

void PlanDelivery::BroadcastNow(const PlanPtr& plan, Outbox* out) {
  // Why the sequence number: a host stream's sink serves several ranks and
  // must get each plan once.
  const uint64_t seq = ++broadcast_seq_;
  for (const std::shared_ptr<Binding>& b : bindings_) {
    if (!b || b->last_broadcast == seq) continue;
    b->last_broadcast = seq;
    Push(*b, plan, out);
  }
}

void PlanDelivery::SendTo(int rank, const PlanPtr& plan, Outbox* out) {
  if (const std::shared_ptr<Binding>& b = bindings_[static_cast<size_t>(rank)]) Push(*b, plan, out);
}

void PlanDelivery::DeliverDue(Outbox* out) {
  const auto now = scheduler_->Now();
  while (!held_.empty() && held_.front().first <= now) {
    BroadcastNow(held_.front().second, out);
    held_.pop_front();
  }
}

void PlanDelivery::Push(Binding& b, const PlanPtr& plan, Outbox* out) {
  if (b.sink->Push(plan)) out->Flush(b.sink, runner_);
}

}  // namespace psync::server
