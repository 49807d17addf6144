#include "server/kv_store.h"

#include "absl/strings/str_cat.h"
#include "server/limits.h"

namespace psync::server {

absl::Status KvStore::Set(const std::string& key, std::string value) {
  if (key.empty() || key.size() > static_cast<size_t>(kMaxKeyBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key is ", key.size(), " bytes; expected 1..", kMaxKeyBytes));
  }
  if (value.size() > static_cast<size_t>(kMaxValueBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("store value for key '", key, "' is ", value.size(),
                                                   " bytes; the limit is ", kMaxValueBytes));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (kv_.size() >= static_cast<size_t>(kMaxKeysPerJob) && !kv_.count(key)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("store holds ", kv_.size(), " keys already (the limit)"));
    }
    kv_[key] = std::move(value);
  }
  cv_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvStore::Get(const std::string& key, std::chrono::milliseconds timeout,
                                         const std::function<bool()>& cancelled) {
  if (key.empty() || key.size() > static_cast<size_t>(kMaxKeyBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key is ", key.size(), " bytes; expected 1..", kMaxKeyBytes));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    auto it = kv_.find(key);
    if (it != kv_.end()) return it->second;
    if (closed_) return absl::UnavailableError("coordinator is shutting down");
    if (cancelled && cancelled()) return absl::CancelledError(absl::StrCat("get of '", key, "' cancelled"));
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("store key '", key, "' not set within ",
                                                      timeout.count(), " ms"));
    }
    cv_.wait_for(l, std::min<std::chrono::steady_clock::duration>(deadline - now,
                                                                  std::chrono::milliseconds(100)));
  }
}

void KvStore::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

size_t KvStore::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return kv_.size();
}

}  // namespace psync::server
