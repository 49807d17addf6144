// HashStore: an in-process Store (threads of one process, tests).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "worker/comm/store.h"

namespace psync::comm {

class HashStore : public Store {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  // Added helpers (non-blocking).
  bool Contains(const std::string& key);
  size_t NumKeys();

 private:
  // One lock for the whole object; any thread may call any method.
  std::mutex mu_;
  std::condition_variable cv_;             // notified on every Set
  std::map<std::string, std::string> kv_;  // guarded by mu_
};

}  // namespace psync::comm
