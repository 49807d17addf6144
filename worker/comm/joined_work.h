// JoinedWork: one Work over several issued in order (a collective composed
// of others, such as ProcessGroup::Shift's default of one broadcast per
// rank). Wait waits for every part, sharing the timeout, and returns the
// first failure; it is complete once every part is.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "psync/comm/work.h"

namespace psync::comm {

class JoinedWork : public Work {
 public:
  JoinedWork(std::vector<std::shared_ptr<Work>> parts, std::string desc)
      : parts_(std::move(parts)), desc_(std::move(desc)) {}
  absl::Status Wait(std::chrono::milliseconds timeout) override;
  bool IsCompleted() override;
  std::string Describe() const override { return desc_; }

 private:
  const std::vector<std::shared_ptr<Work>> parts_;
  const std::string desc_;
};

}  // namespace psync::comm
