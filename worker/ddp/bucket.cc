#include "worker/ddp/bucket.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/str_cat.h"

#include "psync/common/logging.h"
#include "psync/tensor/ops.h"

namespace psync::ddp {

Bucket Bucket::Build(size_t index, const std::vector<size_t>& param_indices,
                     const std::vector<autograd::Variable>& params, comm::ProcessGroup* group,
                     int64_t tail_elements, int64_t min_elements) {
  PSYNC_CHECK(!param_indices.empty()) << "bucket " << index << " has no parameters";
  const Device device = params[param_indices.front()].data().device();
  int64_t total = 0;
  for (size_t i : param_indices) total += params[i].data().numel();
  const int64_t slots_total = total;
  total = std::max(total + tail_elements, min_elements);
  Tensor buffer;
  if (group) {
    absl::StatusOr<Tensor> b = group->NewCollectiveBuffer({total}, kFloat32, device);
    if (!b.ok()) {
      throw std::runtime_error(absl::StrCat("bucket ", index, ": buffer of ", total, " floats: ", b.status().ToString()));
    }
    buffer = std::move(*b);
  } else {
    buffer = Tensor::Zeros({total}, device);
  }
  return Cut(index, std::move(buffer), param_indices, params, slots_total, tail_elements);
}

Bucket Bucket::BuildOn(Tensor storage, size_t index, const std::vector<size_t>& param_indices,
                       const std::vector<autograd::Variable>& params, int64_t min_elements) {
  PSYNC_CHECK(!param_indices.empty()) << "bucket " << index << " has no parameters";
  int64_t total = 0;
  for (size_t i : param_indices) total += params[i].data().numel();
  const int64_t n = std::max(total, min_elements);
  if (storage.numel() < n) {
    throw std::runtime_error(absl::StrCat("bucket ", index, ": staging buffer of ", storage.numel(),
                                          " floats, the bucket needs ", n));
  }
  return Cut(index, storage.View(0, {n}), param_indices, params, total, 0);
}

Bucket Bucket::Cut(size_t index, Tensor buffer, const std::vector<size_t>& param_indices,
                   const std::vector<autograd::Variable>& params, int64_t slots_total, int64_t tail_elements) {
  const Device device = buffer.device();
  std::vector<BucketSlot> slots;
  slots.reserve(param_indices.size());
  int64_t offset = 0;
  for (size_t i : param_indices) {
    const Tensor& data = params[i].data();
    PSYNC_CHECK(data.device() == device) << "bucket " << index << " mixes devices";
    slots.push_back(BucketSlot{i, offset, buffer.View(offset, data.shape())});
    offset += data.numel();
  }
  Tensor tail = tail_elements > 0 ? buffer.View(slots_total, {tail_elements}) : Tensor();
  Bucket bucket(index, std::move(buffer), std::move(slots), std::move(tail));
  bucket.ResetForIteration();
  return bucket;
}

std::vector<size_t> Bucket::param_indices() const {
  std::vector<size_t> out;
  out.reserve(slots_.size());
  for (const auto& s : slots_) out.push_back(s.param);
  return out;
}

void Bucket::ResetForIteration() {
  pending = slots_.size();
  launched = false;
  completed = false;
  work.reset();
  launch_time = Clock::time_point{};
  complete_time = Clock::time_point{};
}

void CopyGradIntoSlot(BucketSlot& slot, const autograd::Variable& param) {
  const Tensor& grad = param.grad();
  if (!grad.defined()) {
    ops::Fill(slot.view, 0.0f);
    return;
  }
  if (grad.IsSameView(slot.view)) return;  // accumulated in place
  ops::Copy(slot.view, grad);
  param.set_grad(slot.view);
}

void MoveGradIntoSlot(BucketSlot& slot, const autograd::Variable& param) {
  const Tensor& grad = param.grad();
  if (!grad.defined() || grad.IsSameView(slot.view)) return;
  ops::Copy(slot.view, grad);
  param.set_grad(slot.view);
}

std::string ParameterName(const autograd::Variable& param, size_t index) {
  return param.name().empty() ? absl::StrCat("parameter #", index) : param.name();
}

std::vector<std::string> UnreadyParameterNames(const std::vector<autograd::Variable>& params,
                                               const std::vector<uint8_t>& ready) {
  std::vector<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!ready[i]) names.push_back(ParameterName(params[i], i));
  }
  return names;
}

size_t AdoptAveragedGradients(const std::vector<autograd::Variable>& params, const std::vector<Bucket>& buckets,
                              const std::vector<SlotLocation>& locations, const std::vector<uint8_t>* global_used) {
  size_t unused = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (global_used && !(*global_used)[i]) {
      ++unused;
      continue;
    }
    const BucketSlot& slot = buckets[locations[i].bucket].slots()[locations[i].slot];
    if (!params[i].grad().IsSameView(slot.view)) params[i].set_grad(slot.view);
  }
  return unused;
}

int64_t ParameterBytes(const std::vector<autograd::Variable>& params) {
  int64_t bytes = 0;
  for (const autograd::Variable& p : params) bytes += static_cast<int64_t>(p.data().nbytes());
  return bytes;
}

}  // namespace psync::ddp
