#include "worker/control/coordinator_store.h"

namespace psync::control {

absl::Status CoordinatorStore::Set(const std::string& key, const std::string& value) {
  return client_->StoreSet(prefix_ + key, value);
}

absl::StatusOr<std::string> CoordinatorStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  return client_->StoreGet(prefix_ + key, timeout);
}

}  // namespace psync::control
