// PendingJoins: the Joins JobState has not answered yet, each with its
// deadline on the scheduler. Waiting ones wait for the current generation's
// world to complete (their rank is held in its Rendezvous); in restartable
// mode, queued ones arrived while a generation ran and wait for the next
// (JobState replays them, in arrival order, when it forms). Waiting holds
// no thread: a Join is a ticket and a timer until JobState answers it.
//
// Part of JobState: no lock of its own (JobState's guards it), and every
// answer runs from the Outbox, after that lock is released.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "common/scheduler.h"
#include "psync/v1/coordinator.pb.h"
#include "server/outbox.h"
#include "server/rendezvous.h"

namespace psync::server {

class PendingJoins {
 public:
  using Clock = Scheduler::Clock;
  using JoinDone = std::function<void(absl::StatusOr<JoinAnswer>)>;
  struct Waiting {
    int rank = -1;
    JoinDone done;
    uint64_t timer = 0;
    v1::JoinRequest req;         // for QueueWaiting
    Clock::time_point deadline;  // on the scheduler's clock
  };
  struct Queued {
    uint64_t ticket = 0;  // the caller's CancelJoin ticket, kept when it is replayed
    v1::JoinRequest req;
    JoinDone done;
    Clock::time_point deadline;  // on the scheduler's clock
    uint64_t timer = 0;
  };

  // `expire(ticket)` runs on the scheduler's thread at a Join's deadline; it
  // must take JobState's lock and then take the Join out (TakeWaiting or
  // TakeQueued) if it is still here. `scheduler` must outlive this.
  PendingJoins(Scheduler* scheduler, std::function<void(uint64_t ticket)> expire);
  PendingJoins(const PendingJoins&) = delete;
  PendingJoins& operator=(const PendingJoins&) = delete;

  // Unique across generations.
  uint64_t NewTicket() { return next_ticket_++; }
  void Wait(uint64_t ticket, int rank, const v1::JoinRequest& req, JoinDone done, Clock::time_point deadline);
  void Queue(uint64_t ticket, const v1::JoinRequest& req, JoinDone done, Clock::time_point deadline);

  // Take a Join out, its deadline cancelled; nullopt if it is not here.
  std::optional<Waiting> TakeWaiting(uint64_t ticket);
  std::optional<Queued> TakeQueued(uint64_t ticket);
  std::optional<Queued> TakeOldestQueued();
  bool has_queued() const { return !queued_.empty(); }
  // Coordinator failover: the generation they waited for was replaced by
  // the running one the workers brought (JobResume), so every waiting Join
  // waits for the next generation instead, with its ticket and deadline.
  void QueueWaiting();
  // Elastic worlds: the waiting Join of rank old_ranks[i] now holds rank i.
  void RenumberWaiting(const std::vector<int>& old_ranks);

  // The world is complete: every waiting Join gets `shared` (one call for
  // all: answering thousands of Joins is one loop after unlocking).
  void AnswerWaiting(std::shared_ptr<const SharedJoinResponse> shared, Outbox* out);
  // Every waiting (or queued) Join is refused with `st`; FailWaiting returns
  // the ranks the refused Joins held.
  std::vector<int> FailWaiting(const absl::Status& st, Outbox* out);
  void FailQueued(const absl::Status& st, Outbox* out);

  // Runs `done(result)` from the Outbox.
  static void Answer(JoinDone done, absl::StatusOr<JoinAnswer> result, Outbox* out);

 private:
  Scheduler* const scheduler_;
  const std::function<void(uint64_t)> expire_;
  uint64_t next_ticket_ = 1;
  std::map<uint64_t, Waiting> waiting_;  // by ticket
  std::map<uint64_t, Queued> queued_;    // by ticket = arrival order
};

}  // namespace psync::server
