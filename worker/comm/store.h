// Store: the key-value store process groups bootstrap through (Gloo's
// addresses, the NCCL unique id). Implementations: HashStore (in-process),
// FileStore (a directory shared by the ranks), PrefixStore (a namespace over
// another store), and runtime/'s CoordinatorStore (the gRPC coordinator).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace psync::comm {

class Store {
 public:
  virtual ~Store() = default;
  // Sets `key` (overwrites).
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists or `timeout`; DeadlineExceeded names the key.
  virtual absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Blocks until every key exists or `timeout`; DeadlineExceeded names the missing keys.
  virtual absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
};

}  // namespace psync::comm
