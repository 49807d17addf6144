// PrefixStore: a namespace over another store. Key k becomes "<prefix>/k".
// Give every process-group instance its own prefix (run id, group id,
// generation) so keys from an earlier run are never read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker/comm/store.h"

namespace psync::comm {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  const std::string& prefix() const { return prefix_; }
  std::string FullKey(const std::string& key) const { return prefix_ + "/" + key; }

 private:
  // Immutable after construction; thread safety is the inner store's.
  const std::string prefix_;
  const std::shared_ptr<Store> inner_;
};

}  // namespace psync::comm
