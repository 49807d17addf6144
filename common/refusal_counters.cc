#include "common/refusal_counters.h"

namespace psync {

RefusalCounters::RefusalCounters(std::vector<std::string> methods, std::chrono::milliseconds log_every)
    : methods_(std::move(methods)),
      counts_(new std::atomic<uint64_t>[methods_.size() + 1]),
      log_every_(log_every) {
  for (size_t i = 0; i <= methods_.size(); ++i) counts_[i].store(0);
}

size_t RefusalCounters::IndexOf(absl::string_view method) const {
  // A handful of methods: a linear scan is cheaper than hashing the path.
  for (size_t i = 0; i < methods_.size(); ++i) {
    if (methods_[i] == method) return i;
  }
  return methods_.size();
}

bool RefusalCounters::Count(absl::string_view method, uint64_t* suppressed) {
  counts_[IndexOf(method)].fetch_add(1, std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> l(log_mu_);
  if (last_log_ != std::chrono::steady_clock::time_point{} && now - last_log_ < log_every_) {
    ++unlogged_;
    return false;
  }
  last_log_ = now;
  *suppressed = unlogged_;
  unlogged_ = 0;
  return true;
}

std::vector<RefusalCounters::Entry> RefusalCounters::Snapshot() const {
  std::vector<Entry> out;
  out.reserve(methods_.size() + 1);
  for (size_t i = 0; i < methods_.size(); ++i) out.push_back({methods_[i], counts_[i].load()});
  out.push_back({std::string(kOther), counts_[methods_.size()].load()});
  return out;
}

uint64_t RefusalCounters::Of(absl::string_view method) const {
  return counts_[method == kOther ? methods_.size() : IndexOf(method)].load();
}

uint64_t RefusalCounters::Total() const {
  uint64_t n = 0;
  for (size_t i = 0; i <= methods_.size(); ++i) n += counts_[i].load();
  return n;
}

}  // namespace psync
