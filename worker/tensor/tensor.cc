#include "psync/tensor/tensor.h"

#include <numeric>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/tensor/ops/copy.h"

namespace psync {

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t NumelOf(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Strides ContiguousStrides(const Shape& shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

namespace {

void CheckShape(const Shape& shape, const char* op) {
  for (int64_t d : shape) {
    if (d < 0) throw TensorError(absl::StrCat(op, ": negative dimension in shape ", ShapeToString(shape)));
  }
}

int64_t WrapDim(int64_t d, int64_t nd, const char* op, const Shape& shape) {
  const int64_t i = d < 0 ? d + nd : d;
  if (i < 0 || i >= nd) {
    throw TensorError(absl::StrCat(op, ": dimension ", d, " out of range for shape ", ShapeToString(shape)));
  }
  return i;
}

// Strides that make `to` a view of a tensor with `shape`/`strides` holding the
// same elements in the same row-major order, when such strides exist (as
// torch.view decides): the old dims are cut into chunks that are contiguous
// among themselves, and every new dim must fall inside one chunk.
std::optional<Strides> ViewStrides(const Shape& shape, const Strides& strides, const Shape& to) {
  Strides out(to.size());
  if (NumelOf(shape) == 0 || shape.empty()) {
    if (NumelOf(shape) == 0 && !shape.empty()) return std::nullopt;  // nothing to gain; copy
    return ContiguousStrides(to);                                    // a scalar
  }
  int64_t view_d = static_cast<int64_t>(to.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[static_cast<size_t>(d)];
    const bool chunk_ends =
        d == 0 || (shape[static_cast<size_t>(d - 1)] != 1 &&
                   strides[static_cast<size_t>(d - 1)] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || to[static_cast<size_t>(view_d)] == 1)) {
      out[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
      view_numel *= to[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = strides[static_cast<size_t>(d - 1)];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

Tensor Tensor::Empty(const Shape& shape, DType dtype, Device device) {
  CheckShape(shape, "Tensor::Empty");
  const size_t nbytes = static_cast<size_t>(NumelOf(shape)) * ElementSize(dtype);
  return Tensor(Storage::Allocate(nbytes, device), 0, shape, ContiguousStrides(shape), dtype);
}

Tensor Tensor::Zeros(const Shape& shape, DType dtype, Device device) { return Full(shape, 0.0, dtype, device); }

Tensor Tensor::Full(const Shape& shape, float value, Device device) {
  return Full(shape, static_cast<double>(value), kFloat32, device);
}

Tensor Tensor::Full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = Empty(shape, dtype, device);
  ops::Fill(t, value);
  return t;
}

Tensor Tensor::FromHost(const void* values, size_t count, DType dtype, const Shape& shape, Device device) {
  CheckShape(shape, "Tensor::FromVector");
  if (static_cast<int64_t>(count) != NumelOf(shape)) {
    throw TensorError(absl::StrCat("Tensor::FromVector: ", count, " values do not fill shape ", ShapeToString(shape),
                                   " (numel ", NumelOf(shape), ")"));
  }
  Tensor t = Empty(shape, dtype, device);
  CopyBytes(t.raw_data(), device, values, Device::CPU(), t.nbytes());
  return t;
}

Tensor Tensor::Scalar(float value, Device device) { return Full({}, value, device); }

int64_t Tensor::size(int64_t d) const { return shape_[WrapDim(d, dim(), "Tensor::size", shape_)]; }
int64_t Tensor::stride(int64_t d) const { return strides_[WrapDim(d, dim(), "Tensor::stride", shape_)]; }

Device Tensor::device() const { return storage_ ? storage_->device() : Device::CPU(); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  if (!storage_) return nullptr;
  // Why check: a ZeRO-3 parameter's memory is lent only while it is gathered.
  if (!storage_->bound()) storage_->CheckBound();
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(element_size());
}

void Tensor::CheckDType(DType expected, const char* what) const {
  if (!defined()) throw TensorError(absl::StrCat(what, ": undefined tensor"));
  if (dtype_ != expected) {
    throw TensorError(absl::StrCat(what, ": tensor is ", DTypeName(dtype_), ", accessed as ", DTypeName(expected)));
  }
}

Tensor Tensor::View(int64_t offset, const Shape& shape) const {
  if (!defined()) throw TensorError("Tensor::View: undefined tensor");
  CheckShape(shape, "Tensor::View");
  if (!is_contiguous()) throw TensorError(absl::StrCat("Tensor::View: ", DebugString(), " is not contiguous"));
  const int64_t n = NumelOf(shape);
  if (offset < 0 || offset + n > numel()) {
    throw TensorError(absl::StrCat("Tensor::View: offset ", offset, " + shape ", ShapeToString(shape), " (numel ", n,
                                   ") does not fit in tensor of shape ", ShapeToString(shape_), " (numel ", numel(),
                                   ") on ", device().ToString()));
  }
  return Tensor(storage_, offset_ + offset, shape, ContiguousStrides(shape), dtype_);
}

Tensor Tensor::Reshape(const Shape& requested) const {
  if (!defined()) throw TensorError("Tensor::Reshape: undefined tensor");
  Shape shape = requested;
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && infer < 0) {
      infer = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      throw TensorError(absl::StrCat("Tensor::Reshape: invalid shape ", ShapeToString(requested)));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0) {
      throw TensorError(absl::StrCat("Tensor::Reshape: cannot infer -1 in ", ShapeToString(requested), " for ",
                                     ShapeToString(shape_), " (numel ", numel(), ")"));
    }
    shape[static_cast<size_t>(infer)] = numel() / known;
  }
  if (NumelOf(shape) != numel()) {
    throw TensorError(absl::StrCat("Tensor::Reshape: cannot reshape ", ShapeToString(shape_), " (numel ", numel(),
                                   ") to ", ShapeToString(shape), " (numel ", NumelOf(shape), ")"));
  }
  if (std::optional<Strides> strides = ViewStrides(shape_, strides_, shape)) {
    return Tensor(storage_, offset_, shape, std::move(*strides), dtype_);
  }
  const Tensor base = Contiguous();
  return Tensor(base.storage_, base.offset_, shape, ContiguousStrides(shape), dtype_);
}

Tensor Tensor::Permute(const std::vector<int64_t>& dims) const {
  if (!defined()) throw TensorError("Tensor::Permute: undefined tensor");
  const int64_t nd = dim();
  if (static_cast<int64_t>(dims.size()) != nd) {
    throw TensorError(absl::StrCat("Tensor::Permute: ", dims.size(), " dims given for shape ", ShapeToString(shape_)));
  }
  Shape shape(dims.size());
  Strides strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = WrapDim(dims[i], nd, "Tensor::Permute", shape_);
    if (seen[static_cast<size_t>(d)]) {
      throw TensorError(absl::StrCat("Tensor::Permute: dimension ", dims[i], " repeated in [", absl::StrJoin(dims, ", "),
                                     "]"));
    }
    seen[static_cast<size_t>(d)] = true;
    shape[i] = shape_[static_cast<size_t>(d)];
    strides[i] = strides_[static_cast<size_t>(d)];
  }
  return Tensor(storage_, offset_, std::move(shape), std::move(strides), dtype_);
}

Tensor Tensor::Transpose(int64_t dim0, int64_t dim1) const {
  std::vector<int64_t> dims(static_cast<size_t>(dim()));
  std::iota(dims.begin(), dims.end(), 0);
  const int64_t a = WrapDim(dim0, dim(), "Tensor::Transpose", shape_);
  const int64_t b = WrapDim(dim1, dim(), "Tensor::Transpose", shape_);
  std::swap(dims[static_cast<size_t>(a)], dims[static_cast<size_t>(b)]);
  return Permute(dims);
}

Tensor Tensor::Narrow(int64_t dim0, int64_t start, int64_t length) const {
  if (!defined()) throw TensorError("Tensor::Narrow: undefined tensor");
  const int64_t d = WrapDim(dim0, dim(), "Tensor::Narrow", shape_);
  if (start < 0 || length < 0 || start + length > shape_[static_cast<size_t>(d)]) {
    throw TensorError(absl::StrCat("Tensor::Narrow: [", start, ", ", start + length, ") is out of range for dimension ",
                                   dim0, " of ", ShapeToString(shape_)));
  }
  Shape shape = shape_;
  shape[static_cast<size_t>(d)] = length;
  return Tensor(storage_, offset_ + start * strides_[static_cast<size_t>(d)], std::move(shape), strides_, dtype_);
}

Tensor Tensor::Contiguous() const {
  if (!defined()) throw TensorError("Tensor::Contiguous: undefined tensor");
  if (is_contiguous()) return *this;
  Tensor out = Empty(shape_, dtype_, device());
  ops::Copy(out, *this);
  return out;
}

Tensor Tensor::FromStorage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
  if (!storage) throw TensorError("Tensor::FromStorage: null storage");
  const size_t need = static_cast<size_t>(NumelOf(shape)) * ElementSize(dtype);
  if (need > storage->nbytes()) {
    throw TensorError(absl::StrCat("Tensor::FromStorage: ", ShapeToString(shape), " ", DTypeName(dtype), " needs ",
                                   need, " bytes, the storage has ", storage->nbytes()));
  }
  return Tensor(std::move(storage), 0, shape, ContiguousStrides(shape), dtype);
}

Tensor Tensor::To(Device device) const {
  if (!defined()) throw TensorError("Tensor::To: undefined tensor");
  if (device == this->device()) return *this;
  Tensor out = Empty(shape_, dtype_, device);
  ops::Copy(out, *this);
  return out;
}

Tensor Tensor::To(DType dtype) const {
  if (!defined()) throw TensorError("Tensor::To: undefined tensor");
  if (dtype == dtype_) return *this;
  Tensor out = Empty(shape_, dtype, device());
  ops::Copy(out, *this);
  return out;
}

Tensor Tensor::Clone() const {
  if (!defined()) throw TensorError("Tensor::Clone: undefined tensor");
  Tensor out = Empty(shape_, dtype_, device());
  ops::Copy(out, *this);
  return out;
}

void Tensor::CopyToHost(void* dst) const {
  // A device-to-host copy waits for the compute stream, so this sees every
  // op queued before it.
  const Tensor src = Contiguous();
  CopyBytes(dst, Device::CPU(), src.raw_data(), src.device(), src.nbytes());
}

void Tensor::CheckItem() const {
  if (!defined()) throw TensorError("Tensor::Item: undefined tensor");
  if (numel() != 1) {
    throw TensorError(absl::StrCat("Tensor::Item: tensor of shape ", ShapeToString(shape_), " has ", numel(),
                                   " elements, expected 1"));
  }
}

std::string Tensor::DebugString() const {
  if (!defined()) return "Tensor(undefined)";
  return absl::StrCat("Tensor", ShapeToString(shape_), " ", DTypeName(dtype_), " ", device().ToString());
}

}  // namespace psync
