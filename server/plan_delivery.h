// PlanDelivery: where the job's plans go. Each training rank is bound to
// the sink of the Train stream that carries it (its own stream, or a host
// stream shared with the other ranks of its host). A broadcast reaches
// every bound sink once, however many ranks it carries (plans are the same
// on every rank); a plan for one rank (the ABORT telling it that it was
// declared lost, with Plan.ranks naming it) reaches its sink alone. A sink
// is closed when the last of its ranks is released (Done, lost, its own
// connection closed), so a host stream keeps serving its other ranks.
//
// Test-only delay (JobConfig::test_only_plan_delay): broadcasts are held
// back that long, in order, and delivered when the scheduler runs `due`
// (which must call DeliverDue under JobState's lock); BroadcastNow (ABORT)
// is never held back, and ReleaseAll drops what is held.
//
// Threads: no lock and no thread of its own. Every method runs under
// JobState's lock; sinks' Push and Close run there too (they only queue),
// their Flush after it (Outbox).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "common/scheduler.h"
#include "server/outbox.h"
#include "server/plan_sink.h"

namespace psync::server {

class PlanDelivery {
 public:
  // `scheduler` (must outlive this) runs `due` at each held plan's time;
  // `runner` (optional) starts the sinks' flushes of a broadcast.
  PlanDelivery(int world_size, std::chrono::milliseconds test_only_delay, Scheduler* scheduler,
               FlushRunner* runner, std::function<void()> due);
  PlanDelivery(const PlanDelivery&) = delete;
  PlanDelivery& operator=(const PlanDelivery&) = delete;

  // `ranks` now get their plans through `sink`.
  void Bind(const std::vector<int>& ranks, std::shared_ptr<PlanSink> sink);
  // `rank` gets no more plans; its sink closes if no rank is left on it.
  void Release(int rank);
  // Every rank is released and held plans are dropped (the generation ended).
  void ReleaseAll();
  bool bound(int rank) const { return bindings_[static_cast<size_t>(rank)] != nullptr; }

  // `plan` to every bound sink, held back first under the test delay.
  void Broadcast(PlanPtr plan, Outbox* out);
  // `plan` to every bound sink at once, never held back (an ABORT; the
  // caller then releases every rank, which drops the held plans).
  void BroadcastNow(const PlanPtr& plan, Outbox* out);
  // `plan` to `rank`'s sink only (if bound).
  void SendTo(int rank, const PlanPtr& plan, Outbox* out);
  // Delivers the held plans whose time has come.
  void DeliverDue(Outbox* out);

 private:
  // One sink and JobState's bookkeeping on it; shared by the ranks bound to it.
  struct Binding {
    std::shared_ptr<PlanSink> sink;
    int ranks = 0;                // bound ranks; Close() when the last is released
    uint64_t last_broadcast = 0;  // so a host stream's sink gets each broadcast once
  };
  void Push(Binding& b, const PlanPtr& plan, Outbox* out);

  std::chrono::milliseconds delay_;
  Scheduler* const scheduler_;
  FlushRunner* const runner_;  // may be null
  const std::function<void()> due_;
  std::vector<std::shared_ptr<Binding>> bindings_;  // by rank; null = not bound
  uint64_t broadcast_seq_ = 0;
  std::deque<std::pair<Scheduler::Clock::time_point, PlanPtr>> held_;  // oldest first
};

}  // namespace psync::server
