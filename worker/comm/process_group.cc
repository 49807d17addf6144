#include "psync/comm/process_group.h"

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "psync/common/status_from_exception.h"
#include "worker/comm/flat_shard.h"
#include "worker/comm/joined_work.h"
#include "worker/comm/serial_queue.h"
#include "worker/comm/shift.h"
#include "worker/comm/then_work.h"
#include "psync/tensor/ops/pointwise.h"

namespace psync::comm {

absl::Status ThenWork::Wait(std::chrono::milliseconds timeout) {
  absl::Status st = inner_->Wait(timeout);
  if (!st.ok()) return st;
  std::lock_guard<std::mutex> l(mu_);
  if (then_) {
    std::function<void()> fn = std::move(then_);
    then_ = nullptr;
    then_status_ = RunCatching(absl::StrCat(inner_->Describe(), ": after the collective"), fn);
  }
  return then_status_;
}

absl::Status JoinedWork::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::Status first;
  for (const std::shared_ptr<Work>& w : parts_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    absl::Status st = w->Wait(std::max(left, std::chrono::milliseconds(0)));
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

bool JoinedWork::IsCompleted() {
  for (const std::shared_ptr<Work>& w : parts_) {
    if (!w->IsCompleted()) return false;
  }
  return true;
}

namespace internal {

absl::Status CheckShift(const Tensor& send, const Tensor& recv, int distance, int world, const std::string& desc) {
  if (!send.defined() || !recv.defined() || !send.is_contiguous() || !recv.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(desc, ": needs defined, contiguous send and receive tensors"));
  }
  if (send.nbytes() != recv.nbytes() || send.device() != recv.device()) {
    return absl::InvalidArgumentError(absl::StrCat(desc, ": send (", send.nbytes(), " bytes) and receive (",
                                                   recv.nbytes(), " bytes) differ in size or device"));
  }
  if (distance < 1 || distance >= world) {
    return absl::InvalidArgumentError(absl::StrCat(desc, ": distance must be 1..", world - 1, " (the world is ",
                                                   world, " ranks)"));
  }
  return absl::OkStatus();
}

}  // namespace internal

std::shared_ptr<Work> ProcessGroup::Shift(Tensor send, Tensor recv, int distance, const std::string& name) {
  const int world = size(), me = rank();
  const std::string desc = absl::StrCat("shift '", name, "' by ", distance, " on rank ", me, " of ", world);
  if (absl::Status st = internal::CheckShift(send, recv, distance, world, desc); !st.ok()) {
    return internal::SerialQueue::Failed(desc, st);
  }
  const int from = internal::PeersOf(me, world, distance).from;
  Tensor scratch;  // the other ranks' tensors land here, unread
  std::vector<std::shared_ptr<Work>> parts;
  for (int root = 0; root < world; ++root) {
    if (root == me) {
      parts.push_back(Broadcast(send, root, name));
    } else if (root == from) {
      parts.push_back(Broadcast(recv, root, name));
    } else {
      if (!scratch.defined()) scratch = Tensor::Empty(send.shape(), send.dtype(), send.device());
      parts.push_back(Broadcast(scratch, root, name));
    }
  }
  // The scratch tensor lives as long as the broadcasts that write it.
  return std::make_shared<ThenWork>(std::make_shared<JoinedWork>(std::move(parts), desc), [scratch] {});
}

std::shared_ptr<Work> ProcessGroup::AllreduceAverage(Tensor tensor, const std::string& name) {
  std::shared_ptr<Work> w = AllreduceSum(tensor, name);
  const int world = size();
  if (world == 1) return w;
  return std::make_shared<ThenWork>(std::move(w), [tensor, world] {
    // float32/float64 only (the contract in process_group.h): a 16-bit sum
    // is already rounded, and scaling it would round again.
    if (tensor.dtype() != kFloat32 && tensor.dtype() != kFloat64) {
      throw TensorError(absl::StrCat("AllreduceAverage averages float32/float64 tensors, got ", DTypeName(tensor.dtype()),
                                     "; sum it (AllreduceSum) and scale it in float32"));
    }
    ops::ScaleInPlace(tensor, 1.0f / static_cast<float>(world));
  });
}

std::shared_ptr<Work> ProcessGroup::ReduceScatterAverage(Tensor tensor, const std::string& name) {
  std::shared_ptr<Work> w = ReduceScatterSum(tensor, name);
  const int world = size();
  if (world == 1 || !tensor.defined()) return w;
  const ShardRange own = ShardOf(static_cast<size_t>(tensor.numel()), world, rank(), tensor.element_size());
  if (own.empty()) return w;
  return std::make_shared<ThenWork>(std::move(w), [tensor, own, world] {
    ops::ScaleInPlace(tensor.Flatten().View(static_cast<int64_t>(own.begin), {static_cast<int64_t>(own.size())}),
                      1.0f / static_cast<float>(world));
  });
}

absl::StatusOr<Tensor> ProcessGroup::NewCollectiveBuffer(const Shape& shape, DType dtype, Device device) {
  try {
    return Tensor::Zeros(shape, dtype, device);
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(e.what());
  }
}

}  // namespace psync::comm
