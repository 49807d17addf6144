#include "worker/comm/hash_store.h"

#include "absl/strings/str_cat.h"
#include "worker/comm/util.h"

namespace psync::comm {

absl::Status HashStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> l(mu_);
    kv_[key] = value;
  }
  cv_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> HashStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  if (!cv_.wait_for(l, timeout, [&] { return kv_.count(key) > 0; })) {
    return absl::DeadlineExceededError(absl::StrCat("HashStore: timed out after ",
                                                    internal::FormatDuration(timeout),
                                                    " waiting for key '", key, "'"));
  }
  return kv_.at(key);
}

absl::Status HashStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  auto all = [&] {
    for (const auto& k : keys)
      if (!kv_.count(k)) return false;
    return true;
  };
  if (cv_.wait_for(l, timeout, all)) return absl::OkStatus();
  std::vector<std::string> missing;
  for (const auto& k : keys)
    if (!kv_.count(k)) missing.push_back(k);
  return absl::DeadlineExceededError(absl::StrCat("HashStore: timed out after ",
                                                  internal::FormatDuration(timeout),
                                                  " waiting for key(s): ", internal::QuoteJoin(missing)));
}

bool HashStore::Contains(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  return kv_.count(key) > 0;
}

size_t HashStore::NumKeys() {
  std::lock_guard<std::mutex> l(mu_);
  return kv_.size();
}

}  // namespace psync::comm
