// CoordinatorStore: psync::comm::Store over the coordinator's StoreSet /
// StoreGet RPCs, with every key prefixed by `prefix` (JoinResult::store_prefix).
// Thread-safe (CoordinatorClient is). The client must outlive the store.
#pragma once

#include <string>

#include "worker/comm/store.h"
#include "worker/control/coordinator_client.h"

namespace psync::control {

class CoordinatorStore : public psync::comm::Store {
 public:
  CoordinatorStore(CoordinatorClient* client, std::string prefix)
      : client_(client), prefix_(std::move(prefix)) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  CoordinatorClient* client_;
  std::string prefix_;
};

}  // namespace psync::control
