#include "worker/comm/prefix_store.h"

namespace psync::comm {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {}

absl::Status PrefixStore::Set(const std::string& key, const std::string& value) {
  return inner_->Set(FullKey(key), value);
}

absl::StatusOr<std::string> PrefixStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  return inner_->Get(FullKey(key), timeout);
}

absl::Status PrefixStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(FullKey(k));
  return inner_->Wait(full, timeout);
}

}  // namespace psync::comm
