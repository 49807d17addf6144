// ThenWork: a Work that runs `then` once, on the first Wait that finds the
// inner Work finished successfully (so it is ordered after the collective,
// on the waiting thread: the training thread for the reducer). An exception
// thrown by `then` fails that Wait, naming the collective.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "psync/comm/work.h"

namespace psync::comm {

class ThenWork : public Work {
 public:
  ThenWork(std::shared_ptr<Work> inner, std::function<void()> then)
      : inner_(std::move(inner)), then_(std::move(then)) {}
  absl::Status Wait(std::chrono::milliseconds timeout) override;
  bool IsCompleted() override { return inner_->IsCompleted(); }
  std::string Describe() const override { return inner_->Describe(); }

 private:
  const std::shared_ptr<Work> inner_;
  std::mutex mu_;
  std::function<void()> then_;  // guarded by mu_; cleared once run
  absl::Status then_status_;    // guarded by mu_
};

}  // namespace psync::comm
