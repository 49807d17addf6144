// ForwardingGroup: a ProcessGroup that hands every call to another one.
// Tests derive from it to watch or damage one collective (override it,
// call the base) without writing out the whole interface each time.
// Header only: it needs psync's comm headers, which psync_test_support
// does not link; a test that includes it links its group's library anyway.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "psync/comm/process_group.h"

namespace psync::test_support {

class ForwardingGroup : public comm::ProcessGroup {
 public:
  explicit ForwardingGroup(std::shared_ptr<comm::ProcessGroup> inner) : inner_(std::move(inner)) {}
  // Not owned: `inner` outlives this group.
  explicit ForwardingGroup(comm::ProcessGroup* inner) : inner_(std::shared_ptr<void>(), inner) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  std::shared_ptr<comm::Work> AllreduceSum(Tensor t, const std::string& name) override {
    return inner_->AllreduceSum(std::move(t), name);
  }
  std::shared_ptr<comm::Work> AllreduceAverage(Tensor t, const std::string& name) override {
    return inner_->AllreduceAverage(std::move(t), name);
  }
  std::shared_ptr<comm::Work> ReduceScatterSum(Tensor t, const std::string& name) override {
    return inner_->ReduceScatterSum(std::move(t), name);
  }
  std::shared_ptr<comm::Work> ReduceScatterAverage(Tensor t, const std::string& name) override {
    return inner_->ReduceScatterAverage(std::move(t), name);
  }
  std::shared_ptr<comm::Work> Allgather(Tensor t, const std::string& name) override {
    return inner_->Allgather(std::move(t), name);
  }
  std::shared_ptr<comm::Work> Broadcast(Tensor t, int root, const std::string& name) override {
    return inner_->Broadcast(std::move(t), root, name);
  }
  std::shared_ptr<comm::Work> Shift(Tensor send, Tensor recv, int distance, const std::string& name) override {
    return inner_->Shift(std::move(send), std::move(recv), distance, name);
  }
  absl::StatusOr<std::vector<std::string>> AllgatherBytes(const std::string& bytes,
                                                          std::chrono::milliseconds timeout) override {
    return inner_->AllgatherBytes(bytes, timeout);
  }
  absl::Status Barrier(std::chrono::milliseconds timeout) override { return inner_->Barrier(timeout); }
  void Abort(const absl::Status& reason) override { inner_->Abort(reason); }
  absl::StatusOr<Tensor> NewCollectiveBuffer(const Shape& shape, DType dtype, Device device) override {
    return inner_->NewCollectiveBuffer(shape, dtype, device);
  }

 protected:
  comm::ProcessGroup& inner() const { return *inner_; }

 private:
  const std::shared_ptr<comm::ProcessGroup> inner_;
};

}  // namespace psync::test_support
