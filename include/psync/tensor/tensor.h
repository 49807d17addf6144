// Tensor: an n-dimensional, strided view of typed elements in a shared
// Storage (float32, float64, bfloat16, float16 or int64; see dtype.h).
//
// Copying a Tensor copies the handle, not the data (like torch.Tensor).
// Views share storage:
//   View(offset, shape)   a contiguous window (the reducer cuts each
//                         parameter's gradient slot out of a bucket this way)
//   Reshape(shape)        a view when the strides allow one, else a copy
//   Permute / Transpose   reorder dimensions (strides only, no copy)
//   Narrow(dim, start, n) a slice along one dimension (split of q, k, v)
// Strides and offsets count elements, not bytes. Most ops need contiguous
// inputs and make a contiguous copy when given a strided view
// (Contiguous()); outputs are always contiguous.
//
// Tensors carry no autograd state: see include/psync/autograd/variable.h.
// Errors inside tensor code (shape, dtype or device mismatch, CUDA failure)
// throw psync::TensorError; module boundaries convert it to absl::Status.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "psync/common/status_from_exception.h"
#include "psync/tensor/device.h"
#include "psync/tensor/dtype.h"
#include "psync/tensor/storage.h"

namespace psync {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;
std::string ShapeToString(const Shape& shape);  // "[2, 3]"
int64_t NumelOf(const Shape& shape);            // product of dims; 1 for []
Strides ContiguousStrides(const Shape& shape);  // row-major

// InvalidArgument where it becomes a Status (include/psync/common/status_from_exception.h).
class TensorError : public StatusError {
 public:
  explicit TensorError(const std::string& what) : StatusError(absl::StatusCode::kInvalidArgument, what) {}

 protected:
  TensorError(absl::StatusCode code, const std::string& what) : StatusError(code, what) {}
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  // New contiguous storage. Empty leaves the contents uninitialised.
  static Tensor Empty(const Shape& shape, Device device = Device::CPU()) { return Empty(shape, kFloat32, device); }
  static Tensor Empty(const Shape& shape, DType dtype, Device device = Device::CPU());
  static Tensor Zeros(const Shape& shape, Device device = Device::CPU()) { return Zeros(shape, kFloat32, device); }
  static Tensor Zeros(const Shape& shape, DType dtype, Device device = Device::CPU());
  static Tensor Full(const Shape& shape, float value, Device device = Device::CPU());
  static Tensor Full(const Shape& shape, double value, DType dtype, Device device = Device::CPU());
  // float32 (so that a braced list of numbers works: FromVector({1, 2}, {2})).
  static Tensor FromVector(const std::vector<float>& values, const Shape& shape, Device device = Device::CPU()) {
    return FromHost(values.data(), values.size(), kFloat32, shape, device);
  }
  // dtype = DTypeOf<T> (double, int64_t, BFloat16, Float16).
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, const Shape& shape, Device device = Device::CPU()) {
    return FromHost(values.data(), values.size(), DTypeOf<T>::value, shape, device);
  }
  static Tensor Scalar(float value, Device device = Device::CPU());  // float32, shape []
  // A contiguous tensor over the start of `storage` (which must hold
  // numel * element_size bytes): e.g. a process group's shared buffer.
  static Tensor FromStorage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  DType dtype() const { return dtype_; }
  size_t element_size() const { return ElementSize(dtype_); }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;  // likewise
  int64_t numel() const { return NumelOf(shape_); }
  // numel() * element_size(): the bytes a contiguous copy occupies.
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  Device device() const;
  // Row-major with no gaps (strides == ContiguousStrides(shape)); dimensions
  // of size 1 may have any stride.
  bool is_contiguous() const;

  // Typed pointer to the first element (a device pointer for CUDA tensors).
  // Throws TensorError when T does not match dtype(). For strided tensors,
  // element (i, j, ...) is at data<T>()[i*stride(0) + j*stride(1) + ...].
  template <typename T>
  T* data() const {
    CheckDType(DTypeOf<T>::value, "Tensor::data");
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;

  // ---- views (share storage)
  // A contiguous window of `shape` starting `offset` elements into this
  // (contiguous) tensor.
  Tensor View(int64_t offset, const Shape& shape) const;
  // Same elements in row-major order with another shape (one dimension may
  // be -1: inferred). A view whenever the strides allow one (always when
  // contiguous; e.g. splitting the last dim of a column slice), otherwise a
  // contiguous copy, like torch.reshape.
  Tensor Reshape(const Shape& shape) const;
  Tensor Flatten() const { return Reshape({numel()}); }
  // Dimensions reordered: result dim i is this tensor's dim dims[i].
  Tensor Permute(const std::vector<int64_t>& dims) const;
  Tensor Transpose(int64_t dim0, int64_t dim1) const;
  // Elements [start, start+length) along `dim`.
  Tensor Narrow(int64_t dim, int64_t start, int64_t length) const;

  // ---- copies
  // *this when contiguous, else a contiguous copy on the same device.
  Tensor Contiguous() const;
  // To() returns *this unchanged when already on `device` / of `dtype`.
  Tensor To(Device device) const;
  Tensor To(DType dtype) const;  // converts (rounding to nearest even for 16-bit types)
  Tensor Clone() const;          // contiguous deep copy
  // Copies to the host (synchronizes for CUDA); T must match dtype().
  template <typename T = float>
  std::vector<T> ToVector() const {
    CheckDType(DTypeOf<T>::value, "Tensor::ToVector");
    std::vector<T> out(static_cast<size_t>(numel()));
    CopyToHost(out.data());
    return out;
  }
  // The single element (numel must be 1); T must match dtype().
  template <typename T = float>
  T Item() const {
    CheckItem();
    CheckDType(DTypeOf<T>::value, "Tensor::Item");
    T v{};
    CopyToHost(&v);
    return v;
  }

  // ---- identity and aliasing
  bool SharesStorageWith(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  bool IsSameView(const Tensor& other) const {
    return SharesStorageWith(other) && offset_ == other.offset_ && shape_ == other.shape_ &&
           strides_ == other.strides_ && dtype_ == other.dtype_;
  }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  int64_t storage_offset() const { return offset_; }

  std::string DebugString() const;  // "Tensor[2, 3] float32 cpu"

 private:
  Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Strides strides, DType dtype)
      : storage_(std::move(storage)),
        offset_(offset),
        shape_(std::move(shape)),
        strides_(std::move(strides)),
        dtype_(dtype) {}
  static Tensor FromHost(const void* values, size_t count, DType dtype, const Shape& shape, Device device);
  void CheckDType(DType expected, const char* what) const;
  void CheckItem() const;
  // Copies every element, in row-major order, to host memory `dst`.
  void CopyToHost(void* dst) const;

  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  Strides strides_;
  DType dtype_ = kFloat32;
};

}  // namespace psync
