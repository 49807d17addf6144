#include "worker/tensor/tensor.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/tensor/cuda/cuda_ops.h"

namespace psync {

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t NumelOf(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

void CheckShape(const Shape& shape, const char* op) {
  for (int64_t d : shape) {
    if (d < 0) throw TensorError(absl::StrCat(op, ": negative dimension in shape ", ShapeToString(shape)));
  }
}

// Copies n floats between any two devices.
void CopyFloats(float* dst, Device dst_device, const float* src, Device src_device, int64_t n) {
  const size_t nbytes = static_cast<size_t>(n) * sizeof(float);
  if (nbytes == 0 || dst == src) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, nbytes);
  } else {
    cuda_ops::CopyBytes(dst, dst_device, src, src_device, nbytes);
  }
}

}  // namespace

Tensor Tensor::Empty(const Shape& shape, Device device) {
  CheckShape(shape, "Tensor::Empty");
  const size_t nbytes = static_cast<size_t>(NumelOf(shape)) * sizeof(float);
  return Tensor(Storage::Allocate(nbytes, device), 0, shape);
}

Tensor Tensor::Zeros(const Shape& shape, Device device) { return Full(shape, 0.0f, device); }

Tensor Tensor::Full(const Shape& shape, float value, Device device) {
  Tensor t = Empty(shape, device);
  if (device.is_cpu()) {
    float* p = t.data();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = value;
  } else {
    cuda_ops::Fill(device.index, t.data(), t.numel(), value);
  }
  return t;
}

Tensor Tensor::FromVector(const std::vector<float>& values, const Shape& shape, Device device) {
  CheckShape(shape, "Tensor::FromVector");
  if (static_cast<int64_t>(values.size()) != NumelOf(shape)) {
    throw TensorError(absl::StrCat("Tensor::FromVector: ", values.size(),
                                   " values do not fill shape ", ShapeToString(shape), " (numel ",
                                   NumelOf(shape), ")"));
  }
  Tensor t = Empty(shape, device);
  CopyFloats(t.data(), device, values.data(), Device::CPU(), t.numel());
  return t;
}

Tensor Tensor::Scalar(float value, Device device) { return Full({}, value, device); }

int64_t Tensor::size(int64_t d) const {
  const int64_t nd = dim();
  const int64_t i = d < 0 ? d + nd : d;
  if (i < 0 || i >= nd) {
    throw TensorError(absl::StrCat("Tensor::size: dimension ", d, " out of range for shape ",
                                   ShapeToString(shape_)));
  }
  return shape_[i];
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::CPU(); }

float* Tensor::data() const {
  if (!storage_) return nullptr;
  return static_cast<float*>(storage_->data()) + offset_;
}

Tensor Tensor::View(int64_t offset, const Shape& shape) const {
  if (!defined()) throw TensorError("Tensor::View: undefined tensor");
  CheckShape(shape, "Tensor::View");
  const int64_t n = NumelOf(shape);
  if (offset < 0 || offset + n > numel()) {
    throw TensorError(absl::StrCat("Tensor::View: offset ", offset, " + shape ",
                                   ShapeToString(shape), " (numel ", n,
                                   ") does not fit in tensor of shape ", ShapeToString(shape_),
                                   " (numel ", numel(), ") on ", device().ToString()));
  }
  return Tensor(storage_, offset_ + offset, shape);
}

Tensor Tensor::Reshape(const Shape& shape) const {
  if (!defined()) throw TensorError("Tensor::Reshape: undefined tensor");
  CheckShape(shape, "Tensor::Reshape");
  if (NumelOf(shape) != numel()) {
    throw TensorError(absl::StrCat("Tensor::Reshape: cannot reshape ", ShapeToString(shape_),
                                   " (numel ", numel(), ") to ", ShapeToString(shape), " (numel ",
                                   NumelOf(shape), ")"));
  }
  return Tensor(storage_, offset_, shape);
}

Tensor Tensor::To(Device device) const {
  if (!defined()) throw TensorError("Tensor::To: undefined tensor");
  if (device == this->device()) return *this;
  Tensor out = Empty(shape_, device);
  CopyFloats(out.data(), device, data(), this->device(), numel());
  return out;
}

Tensor Tensor::Clone() const {
  if (!defined()) throw TensorError("Tensor::Clone: undefined tensor");
  Tensor out = Empty(shape_, device());
  CopyFloats(out.data(), device(), data(), device(), numel());
  return out;
}

std::vector<float> Tensor::ToVector() const {
  if (!defined()) throw TensorError("Tensor::ToVector: undefined tensor");
  std::vector<float> out(static_cast<size_t>(numel()));
  // A device-to-host copy waits for the compute stream, so this sees every
  // op queued before it.
  CopyFloats(out.data(), Device::CPU(), data(), device(), numel());
  return out;
}

float Tensor::Item() const {
  if (!defined()) throw TensorError("Tensor::Item: undefined tensor");
  if (numel() != 1) {
    throw TensorError(absl::StrCat("Tensor::Item: tensor of shape ", ShapeToString(shape_),
                                   " has ", numel(), " elements, expected 1"));
  }
  float v = 0.0f;
  CopyFloats(&v, Device::CPU(), data(), device(), 1);
  return v;
}

std::string Tensor::DebugString() const {
  if (!defined()) return "Tensor(undefined)";
  return absl::StrCat("Tensor", ShapeToString(shape_), " ", device().ToString());
}

}  // namespace psync
