#include "server/kv_store.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "server/limits.h"

namespace psync::server {
namespace {
absl::Status CheckKey(const std::string& key) {
  if (key.empty() || key.size() > static_cast<size_t>(kMaxKeyBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key is ", key.size(), " bytes; expected 1..", kMaxKeyBytes));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status KvStore::Set(const std::string& key, std::string value) {
  if (absl::Status st = CheckKey(key); !st.ok()) return st;
  if (value.size() > static_cast<size_t>(kMaxValueBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("store value for key '", key, "' is ", value.size(),
                                                   " bytes; the limit is ", kMaxValueBytes));
  }
  std::vector<std::pair<GetDone, uint64_t>> woken;  // (callback, timer)
  std::string copy;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (kv_.size() >= static_cast<size_t>(kMaxKeysPerJob) && !kv_.count(key)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("store holds ", kv_.size(), " keys already (the limit)"));
    }
    // Why: every Get waiting for this key is answered now, with this value.
    auto [lo, hi] = by_key_.equal_range(key);
    for (auto it = lo; it != hi; ++it) {
      auto w = waiters_.find(it->second);
      woken.emplace_back(std::move(w->second.done), w->second.timer);
      waiters_.erase(w);
    }
    by_key_.erase(lo, hi);
    if (!woken.empty()) copy = value;
    kv_[key] = std::move(value);
  }
  for (auto& [done, timer] : woken) {
    scheduler_->Cancel(timer);
    done(copy);
  }
  return absl::OkStatus();
}

uint64_t KvStore::Get(const std::string& key, std::chrono::milliseconds timeout, GetDone done) {
  if (absl::Status st = CheckKey(key); !st.ok()) {
    done(st);
    return 0;
  }
  std::unique_lock<std::mutex> l(mu_);
  if (auto it = kv_.find(key); it != kv_.end()) {
    std::string v = it->second;
    l.unlock();
    done(std::move(v));
    return 0;
  }
  if (closed_) {
    l.unlock();
    done(absl::UnavailableError("coordinator is shutting down"));
    return 0;
  }
  if (timeout.count() <= 0) {
    l.unlock();
    done(absl::DeadlineExceededError(absl::StrCat("store key '", key, "' is not set (timeout_ms 0)")));
    return 0;
  }
  // Why: the key is not there yet; the Get waits (holding no thread) until
  // Set adds it, its deadline passes, or it is cancelled.
  const uint64_t ticket = next_ticket_++;
  Waiter& w = waiters_[ticket];
  w.key = key;
  w.done = std::move(done);
  w.timeout = timeout;
  by_key_.emplace(key, ticket);
  // Scheduled under mu_ so the timer id is recorded before anyone can take
  // the waiter; the callback itself runs on the scheduler's thread later.
  w.timer = scheduler_->RunAt(scheduler_->Now() + timeout, [this, ticket] { Expire(ticket); });
  return ticket;
}

KvStore::GetDone KvStore::TakeLocked(uint64_t ticket, uint64_t* timer) {
  auto it = waiters_.find(ticket);
  if (it == waiters_.end()) return nullptr;
  auto [lo, hi] = by_key_.equal_range(it->second.key);
  for (auto k = lo; k != hi; ++k) {
    if (k->second == ticket) {
      by_key_.erase(k);
      break;
    }
  }
  GetDone done = std::move(it->second.done);
  if (timer) *timer = it->second.timer;
  waiters_.erase(it);
  return done;
}

void KvStore::Expire(uint64_t ticket) {
  std::string key;
  std::chrono::milliseconds timeout{0};
  GetDone done;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = waiters_.find(ticket);
    if (it == waiters_.end()) return;
    key = it->second.key;
    timeout = it->second.timeout;
    done = TakeLocked(ticket, nullptr);  // why: its deadline passed without a Set
  }
  done(absl::DeadlineExceededError(
      absl::StrCat("store key '", key, "' not set within ", timeout.count(), " ms")));
}

void KvStore::Cancel(uint64_t ticket) {
  if (ticket == 0) return;
  std::string key;
  uint64_t timer = 0;
  GetDone done;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = waiters_.find(ticket);
    if (it == waiters_.end()) return;
    key = it->second.key;
    done = TakeLocked(ticket, &timer);  // why: the caller went away
  }
  scheduler_->Cancel(timer);
  done(absl::CancelledError(absl::StrCat("get of '", key, "' cancelled")));
}

void KvStore::Close() {
  std::vector<std::pair<GetDone, uint64_t>> woken;
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;  // why: the server is shutting down; nobody will Set any more
    for (auto& [ticket, w] : waiters_) woken.emplace_back(std::move(w.done), w.timer);
    waiters_.clear();
    by_key_.clear();
  }
  for (auto& [done, timer] : woken) {
    scheduler_->Cancel(timer);
    done(absl::UnavailableError("coordinator is shutting down"));
  }
}

size_t KvStore::ErasePrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  // Keys are ordered, so the ones with this prefix are one contiguous range.
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = kv_.erase(it);
    ++n;
  }
  return n;
}

size_t KvStore::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return kv_.size();
}

size_t KvStore::waiting() const {
  std::lock_guard<std::mutex> l(mu_);
  return waiters_.size();
}

}  // namespace psync::server
