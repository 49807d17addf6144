// KvStore: the key-value store workers bootstrap Gloo / NCCL through.
// Thread-safe: StoreSet handlers write, StoreGet handlers block in Get.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace psync::server {

class KvStore {
 public:
  // InvalidArgument for keys/values over the limits (server/limits.h);
  // ResourceExhausted when the store already holds kMaxKeysPerJob keys.
  absl::Status Set(const std::string& key, std::string value);
  // Waits up to `timeout` for `key` (polling `cancelled` every 100 ms).
  // DeadlineExceeded names the key.
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout,
                                  const std::function<bool()>& cancelled = nullptr);
  // Wakes all waiters with Unavailable (server shutdown).
  void Close();
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
  bool closed_ = false;
};

}  // namespace psync::server
