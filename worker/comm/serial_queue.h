// SerialQueue: runs a process group's collectives one at a time, in issue
// order, on one communication thread, and hands out their Work handles.
// Used by the gloo, shm and hier groups.
//
// Failure model (the ProcessGroup contract): the first failure (an op that
// returned an error, a Work::Wait that timed out, Abort) poisons the queue.
// Every queued and later op then fails fast with that original reason's code
// and message. `on_poison` runs once, on the poisoning thread, with the
// reason: the group uses it to unblock the running op (and its peers).
//
// Threads and ownership: any thread may Enqueue, Wait, Poison. Ops run one
// at a time, in issue order: on the communication thread, or, for ops
// enqueued with `inline_ok`, on the thread that Waits for one while it is
// next in line and nothing runs (the reducer's last bucket: launched, then
// waited for at once): no hand-off to the communication thread and back,
// which costs two wake-ups (tens of microseconds idle, milliseconds on a
// busy host). All queue state is guarded by one mutex; each Work has its
// own. The thread holds a shared_ptr to the queue, so a thread detached by
// Stop() stays valid.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "psync/comm/work.h"

namespace psync::comm::internal {

class QueuedWork;

class SerialQueue : public std::enable_shared_from_this<SerialQueue> {
 public:
  using Clock = std::chrono::steady_clock;
  // `deadline`: when the op runs inline in a Wait, that Wait's deadline
  // (the op must give up then); on the communication thread, max().
  using Op = std::function<absl::Status(Clock::time_point deadline)>;
  using PoisonHook = std::function<void(const absl::Status&)>;

  // Starts the communication thread.
  static std::shared_ptr<SerialQueue> Start(PoisonHook on_poison);
  ~SerialQueue();

  // Queues `op` (described by `desc` in errors). On a poisoned queue the
  // Work fails at once with the original reason. `inline_ok`: a Wait may
  // run it on the waiting thread (see above).
  std::shared_ptr<Work> Enqueue(std::string desc, Op op, bool inline_ok = false);
  // A Work that already failed with `status` (bad arguments).
  static std::shared_ptr<Work> Failed(std::string desc, absl::Status status);
  // First reason wins; fails every queued and the running op.
  void Poison(const absl::Status& reason);
  // OK while healthy, else the poisoning reason.
  absl::Status health() const;
  // Asks the thread to finish and joins it; when an op is still running
  // after `bound` (a poisoned op the hook could not unblock), detaches it.
  void Stop(std::chrono::milliseconds bound);

 private:
  friend class QueuedWork;
  explicit SerialQueue(PoisonHook on_poison) : on_poison_(std::move(on_poison)) {}
  void Loop();
  // Runs `w` on the calling thread if it is next and nothing runs; false
  // (and nothing done) otherwise.
  bool RunInline(const std::shared_ptr<QueuedWork>& w, Clock::time_point deadline);
  void Finish(const std::shared_ptr<QueuedWork>& w, const absl::Status& st);

  const PoisonHook on_poison_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // queue / stop / exited changes
  // Guarded by mu_.
  std::deque<std::shared_ptr<QueuedWork>> queue_;
  std::shared_ptr<QueuedWork> running_;  // on the communication thread or inline
  absl::Status poison_;
  bool stop_ = false;
  bool exited_ = false;
  std::thread thread_;  // started in Start(); joined or detached by Stop()
};

// The Work of one queued op.
class QueuedWork : public Work, public std::enable_shared_from_this<QueuedWork> {
 public:
  QueuedWork(std::string desc, SerialQueue::Op op, std::weak_ptr<SerialQueue> queue, bool inline_ok = false)
      : desc_(std::move(desc)), op_(std::move(op)), queue_(std::move(queue)), inline_ok_(inline_ok) {}
  absl::Status Wait(std::chrono::milliseconds timeout) override;
  bool IsCompleted() override { return done_.load(std::memory_order_acquire); }
  std::string Describe() const override { return desc_; }

  // First completion wins; true when this call completed the work.
  bool Complete(const absl::Status& status);
  absl::Status Run(SerialQueue::Clock::time_point deadline) { return op_ ? op_(deadline) : absl::OkStatus(); }
  const std::string& desc() const { return desc_; }

 private:
  const std::string desc_;
  SerialQueue::Op op_;  // holds the tensor handles: memory stays alive while the op may run
  const std::weak_ptr<SerialQueue> queue_;
  const bool inline_ok_;
  std::atomic<bool> done_{false};  // set under mu_; read without it (IsCompleted)
  std::mutex mu_;
  std::condition_variable cv_;
  absl::Status status_;  // guarded by mu_
};

}  // namespace psync::comm::internal
