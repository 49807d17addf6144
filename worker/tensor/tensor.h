// Tensor: a float32, contiguous, n-dimensional view into a shared Storage.
//
// Copying a Tensor copies the handle, not the data (like torch.Tensor).
// Views (View, Reshape) share storage; the reducer uses View to make each
// parameter's gradient a slice of its bucket's flat buffer.
//
// Tensors carry no autograd state: see worker/autograd/variable.h.
// Errors inside tensor code (shape mismatch, device mismatch, CUDA failure)
// throw psync::TensorError; module boundaries convert it to absl::Status.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/tensor/device.h"
#include "worker/tensor/storage.h"

namespace psync {

using Shape = std::vector<int64_t>;
std::string ShapeToString(const Shape& shape);  // "[2, 3]"
int64_t NumelOf(const Shape& shape);            // product of dims; 1 for []

class TensorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  // New storage. Empty leaves the contents uninitialised.
  static Tensor Empty(const Shape& shape, Device device = Device::CPU());
  static Tensor Zeros(const Shape& shape, Device device = Device::CPU());
  static Tensor Full(const Shape& shape, float value, Device device = Device::CPU());
  static Tensor FromVector(const std::vector<float>& values, const Shape& shape,
                           Device device = Device::CPU());
  static Tensor Scalar(float value, Device device = Device::CPU());  // shape []

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return NumelOf(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * sizeof(float); }
  Device device() const;

  // Raw pointer to the first element (a device pointer for CUDA tensors).
  float* data() const;

  // A view of `shape` starting `offset` elements into this tensor's data.
  Tensor View(int64_t offset, const Shape& shape) const;
  Tensor Reshape(const Shape& shape) const;  // view; numel must match
  Tensor Flatten() const { return Reshape({numel()}); }

  // Deep copies. To() returns *this unchanged when already on `device`.
  Tensor To(Device device) const;
  Tensor Clone() const;
  std::vector<float> ToVector() const;  // copies to host (synchronizes for CUDA)
  float Item() const;                   // numel must be 1

  // Identity and aliasing.
  bool SharesStorageWith(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  bool IsSameView(const Tensor& other) const {
    return SharesStorageWith(other) && offset_ == other.offset_ && shape_ == other.shape_;
  }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  int64_t storage_offset() const { return offset_; }

  std::string DebugString() const;  // "Tensor[2, 3] cpu"

 private:
  Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape)
      : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)) {}
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
};

}  // namespace psync
