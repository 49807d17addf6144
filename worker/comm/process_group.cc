#include "psync/comm/process_group.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "psync/common/status_from_exception.h"
#include "worker/comm/flat_shard.h"
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
