#include "worker/comm/serial_queue.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "psync/common/logging.h"
#include "worker/comm/util.h"

namespace psync::comm::internal {

namespace {
absl::Status WithPrefix(const absl::Status& original, const std::string& desc, const char* what) {
  return absl::Status(original.code(), absl::StrCat(desc, " ", what, ": process group failed",
                                                    " earlier: ", std::string(original.message())));
}
}  // namespace

std::shared_ptr<SerialQueue> SerialQueue::Start(PoisonHook on_poison) {
  std::shared_ptr<SerialQueue> q(new SerialQueue(std::move(on_poison)));
  q->thread_ = std::thread([q] { q->Loop(); });
  return q;
}

SerialQueue::~SerialQueue() {
  // Stop() joined or detached the thread; a detached thread holds a
  // reference, so reaching here means it is gone.
  if (thread_.joinable()) thread_.detach();
}

std::shared_ptr<Work> SerialQueue::Failed(std::string desc, absl::Status status) {
  auto w = std::make_shared<QueuedWork>(std::move(desc), Op(), std::weak_ptr<SerialQueue>());
  w->Complete(status);
  return w;
}

std::shared_ptr<Work> SerialQueue::Enqueue(std::string desc, Op op, bool inline_ok) {
  auto w = std::make_shared<QueuedWork>(std::move(desc), std::move(op), weak_from_this(), inline_ok);
  absl::Status poisoned;
  {
    std::lock_guard<std::mutex> l(mu_);
    poisoned = poison_;
    if (poisoned.ok() && !stop_) queue_.push_back(w);
  }
  if (!poisoned.ok()) {
    w->Complete(WithPrefix(poisoned, w->desc(), "not run"));
  } else {
    cv_.notify_all();
  }
  return w;
}

void SerialQueue::Poison(const absl::Status& reason) {
  std::vector<std::shared_ptr<QueuedWork>> fail;
  absl::Status original;
  bool first = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (poison_.ok()) {
      poison_ = reason.ok() ? absl::AbortedError("process group aborted") : reason;
      first = true;
    }
    original = poison_;
    for (auto& w : queue_) fail.push_back(std::move(w));
    queue_.clear();
    if (running_) fail.push_back(running_);
  }
  cv_.notify_all();
  // Why before failing the works: a waiter that wakes up may destroy the
  // group next; the hook must have told the running op (and peers) first.
  if (first && on_poison_) on_poison_(original);
  for (auto& w : fail) w->Complete(WithPrefix(original, w->desc(), "not completed"));
}

absl::Status SerialQueue::health() const {
  std::lock_guard<std::mutex> l(mu_);
  return poison_;
}

void SerialQueue::Finish(const std::shared_ptr<QueuedWork>& w, const absl::Status& st) {
  {
    std::lock_guard<std::mutex> l(mu_);
    running_.reset();
  }
  cv_.notify_all();  // the communication thread may take the next op now
  if (!st.ok()) Poison(st);
  w->Complete(st);  // no-op when Poison / a Wait timeout already failed it
}

void SerialQueue::Loop() {
  while (true) {
    std::shared_ptr<QueuedWork> w;
    {
      std::unique_lock<std::mutex> l(mu_);
      // Why also !running_: an op may be running inline on a waiting thread.
      cv_.wait(l, [&] { return (stop_ && !running_) || (!queue_.empty() && !running_); });
      if (queue_.empty()) break;  // stop requested and nothing left
      w = std::move(queue_.front());
      queue_.pop_front();
      running_ = w;
    }
    Finish(w, w->Run(Clock::time_point::max()));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    exited_ = true;
  }
  cv_.notify_all();
}

bool SerialQueue::RunInline(const std::shared_ptr<QueuedWork>& w, Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (running_ || stop_ || !poison_.ok() || queue_.empty() || queue_.front() != w) return false;
    queue_.pop_front();
    running_ = w;
  }
  Finish(w, w->Run(deadline));
  return true;
}

void SerialQueue::Stop(std::chrono::milliseconds bound) {
  bool busy;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    busy = running_ != nullptr || !queue_.empty();
  }
  if (busy) Poison(absl::AbortedError("process group destroyed with collectives pending"));
  cv_.notify_all();
  bool exited;
  {
    std::unique_lock<std::mutex> l(mu_);
    exited = cv_.wait_for(l, bound, [&] { return exited_; });
  }
  if (!thread_.joinable()) return;
  if (exited) {
    thread_.join();
  } else {
    PSYNC_LOG(WARNING) << "communication thread still inside a collective after " << FormatDuration(bound)
                       << "; detaching it";
    thread_.detach();
  }
}

bool QueuedWork::Complete(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (done_.load(std::memory_order_relaxed)) return false;
    status_ = status;
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  return true;
}

absl::Status QueuedWork::Wait(std::chrono::milliseconds timeout) {
  if (inline_ok_ && !done_.load(std::memory_order_acquire)) {
    if (auto q = queue_.lock()) q->RunInline(shared_from_this(), SerialQueue::Clock::now() + timeout);
  }
  {
    std::unique_lock<std::mutex> l(mu_);
    if (cv_.wait_for(l, timeout, [&] { return done_.load(std::memory_order_relaxed); })) return status_;
  }
  const absl::Status deadline =
      absl::DeadlineExceededError(absl::StrCat(desc_, " timed out after ", FormatDuration(timeout)));
  // Why poison: the collective is still in flight on the peers; the group
  // cannot be used safely after it.
  if (auto q = queue_.lock()) q->Poison(deadline);
  Complete(deadline);  // when the op was neither queued nor running
  std::lock_guard<std::mutex> l(mu_);
  return status_;
}

}  // namespace psync::comm::internal
