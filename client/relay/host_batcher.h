// HostBatcher: psync-relay's policy for one upstream host stream, without
// gRPC (the rules are in plan_relay.h and client/relay/README.md):
//   - forming: which local ranks the stream carries (until `expect_ranks`
//     said hello, or `form_wait` after the first did);
//   - the hold rule: a report waits for the other live local ranks' reports
//     of its iteration, at most `max_hold` after the iteration's first one,
//     then goes up in one ReportBatch; batches go up in iteration order;
//   - Done and RankClosed go up after that rank's held reports; a Done's
//     local stream ends once it is written;
//   - which local streams get a plan, and when the stream half-closes.
// The transport (UpstreamStream) writes what Next() hands it and tells the
// batcher what came down (Recipients, End); the local streams feed it
// (Report, Heartbeat, Done, Gone).
//
// Time: the two deadlines run on a Scheduler: the relay's TimerQueue, or a
// ManualScheduler in tests (tests/unit/relay).
//
// Threads: thread-safe; one mutex (mu_) guards all state. Callers: the
// local streams' gRPC callback threads, the upstream stream's sender (Next,
// WaitNext, DoneWritten) and reader (Recipients, Stop, End), the
// scheduler's thread (deadlines) and Shutdown (Cancel). LocalSink::End is
// called with mu_ held (lock order: batcher, then a sink's own lock).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/scheduler.h"
#include "psync/v1/coordinator.pb.h"

namespace psync::relay {

// The write side of one local worker's stream, as the batcher sees it.
class LocalSink {
 public:
  virtual ~LocalSink() = default;
  // Queues a plan for the worker.
  virtual void Push(std::shared_ptr<const v1::Plan> plan) = 0;
  // Ends the worker's stream with `status` after the plans already queued;
  // the first End wins.
  virtual void End(const absl::Status& status) = 0;
};

struct BatcherOptions {
  int expect_ranks = 0;                        // forming ends once this many ranks joined (0: only form_wait)
  std::chrono::milliseconds form_wait{2000};   // ... or this long after the first joined
  std::chrono::microseconds max_hold{2000};    // the hold rule's bound
};

// One message for the upstream stream.
struct UpMessage {
  v1::TrainUp up;
  int end_rank = -1;  // once written: DoneWritten(end_rank) (it is that rank's Done)
};

// What the upstream stream's sender does next.
struct SendStep {
  enum Kind {
    kWait,       // nothing yet
    kOpen,       // open the stream with Hello{ranks} (once, first)
    kSend,       // write `messages` in order
    kHalfClose,  // every local rank is done or gone: WritesDone
    kStop,       // stop writing (the stream ended, the relay shuts down, or forming found no rank)
  };
  Kind kind = kWait;
  std::vector<int> ranks;
  std::vector<UpMessage> messages;
};

class HostBatcher : public std::enable_shared_from_this<HostBatcher> {
 public:
  using Clock = Scheduler::Clock;

  // A batcher is always shared (its deadlines hold weak pointers to it).
  // `scheduler` must outlive its deadlines (End cancels them).
  static std::shared_ptr<HostBatcher> Create(const BatcherOptions& opt, Scheduler* scheduler);
  HostBatcher(const HostBatcher&) = delete;
  HostBatcher& operator=(const HostBatcher&) = delete;

  // Adds a local rank while forming; false once formed or ended (the rank
  // then belongs to another batcher).
  bool Add(int rank, std::shared_ptr<LocalSink> sink);
  bool HasRank(int rank) const;  // false once ended
  int size() const;              // the ranks it carries; 0 once ended
  bool ended() const;

  // From the local streams.
  void Report(int rank, v1::Report report);
  void Heartbeat(const v1::Heartbeat& heartbeat);
  void Done(int rank, v1::Done done);
  // The rank's local stream ended without Done (or broke the protocol).
  void Gone(int rank, const std::string& cause);

  // For the sender: the next step, never blocking / blocking while kWait.
  SendStep Next();
  SendStep WaitNext();
  // The rank's Done was written upstream: its local stream ends (OK).
  void DoneWritten(int rank);

  // For the reader: the local streams a plan goes to (every rank's, or
  // those named in plan.ranks), in rank order.
  std::vector<std::shared_ptr<LocalSink>> Recipients(const v1::Plan& plan);
  // The upstream stream stopped: Next() says kStop from now on.
  void Stop();
  // The relay shuts down: before kOpen was handed out, every local stream
  // ends UNAVAILABLE; afterwards as Stop (the reader's End follows with the
  // stream's status).
  void Cancel();
  // The upstream stream ended with `status`: every local stream ends with
  // it, so a worker sees what it would have seen on its own stream.
  void End(const absl::Status& status);

 private:
  enum class Phase { kForming, kOpen, kEnded };
  struct Member {
    std::shared_ptr<LocalSink> sink;  // reset once its stream was ended
    bool live = true;                 // not done, not gone: its reports are waited for
  };
  struct Held {
    Clock::time_point first;          // the iteration's first report
    std::map<int, v1::Report> by_rank;
  };

  HostBatcher(const BatcherOptions& opt, Scheduler* scheduler);
  void OnFormDeadline();
  void OnHoldDeadline(uint64_t seq);
  // Forming is over: open with the ranks there are, or end when none is left.
  void FormLocked();
  // Moves held reports that are complete (or due, or all with `force`) into
  // out_, oldest iteration first; never while forming (except `force`).
  void FlushLocked(bool force);
  // Keeps one deadline armed at the oldest held iteration's bound.
  void ArmHoldLocked();
  void EndLocked(const absl::Status& status);
  SendStep NextLocked();
  bool AnyLiveLocked() const;
  void Wake() { cv_.notify_all(); }

  const BatcherOptions opt_;
  Scheduler* const scheduler_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // WaitNext waits here
  Phase phase_ = Phase::kForming;
  bool announced_ = false;      // kOpen was handed out
  bool stopping_ = false;       // Stop or Cancel
  bool all_aborted_ = false;    // an ABORT for every rank came down
  std::map<int, Member> members_;       // by rank
  std::map<int64_t, Held> held_;        // by iteration
  std::vector<UpMessage> out_;          // ready to go up, in order
  uint64_t form_timer_ = 0;
  uint64_t hold_timer_ = 0;
  uint64_t hold_seq_ = 0;               // tells a stale hold deadline from the armed one
  Clock::time_point hold_at_{};         // when the armed hold deadline fires
};

}  // namespace psync::relay
