#include "psync/autograd/view_functions.h"

#include <numeric>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/autograd/function_node.h"
#include "psync/tensor/ops.h"

namespace psync::autograd {
namespace {

class ReshapeBackward : public SingleOutputNode {
 public:
  explicit ReshapeBackward(Shape input_shape) : SingleOutputNode("ReshapeBackward", false), shape_(std::move(input_shape)) {}

 private:
  TensorList Backward(const Tensor& g) override { return {g.Reshape(shape_)}; }
  const Shape shape_;
};

class PermuteBackward : public SingleOutputNode {
 public:
  explicit PermuteBackward(const std::vector<int64_t>& dims) : SingleOutputNode("PermuteBackward", false), inverse_(dims.size()) {
    for (size_t i = 0; i < dims.size(); ++i) {
      const int64_t d = dims[i] < 0 ? dims[i] + static_cast<int64_t>(dims.size()) : dims[i];
      inverse_[static_cast<size_t>(d)] = static_cast<int64_t>(i);
    }
  }

 private:
  TensorList Backward(const Tensor& g) override { return {g.Permute(inverse_)}; }
  std::vector<int64_t> inverse_;
};

class SplitBackward : public FunctionNode {
 public:
  SplitBackward(Shape input_shape, std::vector<int64_t> sizes, int64_t dim)
      : FunctionNode("SplitBackward", false), shape_(std::move(input_shape)), sizes_(std::move(sizes)), dim_(dim) {}

 private:
  TensorList BackwardAll(const TensorList& grads) override {
    // One gradient of the input's shape: each piece's gradient in its slice.
    const Tensor* any = nullptr;
    for (const Tensor& g : grads) {
      if (g.defined()) any = &g;
    }
    Tensor out = Tensor::Empty(shape_, any->dtype(), any->device());
    int64_t offset = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      Tensor slice = out.Narrow(dim_, offset, sizes_[i]);
      if (grads[i].defined()) {
        ops::Copy(slice, grads[i]);
      } else {
        ops::Copy(slice, Tensor::Zeros(slice.shape(), out.dtype(), out.device()));
      }
      offset += sizes_[i];
    }
    return {out};
  }
  const Shape shape_;
  const std::vector<int64_t> sizes_;
  const int64_t dim_;
};

}  // namespace

Variable Reshape(const Variable& x, const Shape& shape) {
  CheckDefined("Reshape", {&x});
  Tensor out = x.data().Reshape(shape);
  return Wrap(std::move(out), MakeNode<ReshapeBackward>({&x}, x.shape()));
}

Variable Permute(const Variable& x, const std::vector<int64_t>& dims) {
  CheckDefined("Permute", {&x});
  Tensor out = x.data().Permute(dims);
  return Wrap(std::move(out), MakeNode<PermuteBackward>({&x}, dims));
}

Variable Transpose(const Variable& x, int64_t dim0, int64_t dim1) {
  CheckDefined("Transpose", {&x});
  std::vector<int64_t> dims(static_cast<size_t>(x.data().dim()));
  std::iota(dims.begin(), dims.end(), 0);
  const int64_t nd = x.data().dim();
  const int64_t a = dim0 < 0 ? dim0 + nd : dim0, b = dim1 < 0 ? dim1 + nd : dim1;
  if (a < 0 || a >= nd || b < 0 || b >= nd) {
    throw TensorError(absl::StrCat("Transpose: dimensions (", dim0, ", ", dim1, ") out of range for shape ",
                                   ShapeToString(x.shape())));
  }
  std::swap(dims[static_cast<size_t>(a)], dims[static_cast<size_t>(b)]);
  return Permute(x, dims);
}

std::vector<Variable> Split(const Variable& x, const std::vector<int64_t>& sizes, int64_t dim) {
  CheckDefined("Split", {&x});
  const Tensor& t = x.data();
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  if (d < 0 || d >= t.dim()) {
    throw TensorError(absl::StrCat("Split: dimension ", dim, " out of range for shape ", ShapeToString(x.shape())));
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw TensorError(absl::StrCat("Split: negative size in [", absl::StrJoin(sizes, ", "), "]"));
    total += s;
  }
  if (total != t.size(d)) {
    throw TensorError(absl::StrCat("Split: sizes [", absl::StrJoin(sizes, ", "), "] sum to ", total, ", but dimension ",
                                   dim, " of ", ShapeToString(x.shape()), " has ", t.size(d)));
  }
  std::vector<Tensor> pieces;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    pieces.push_back(t.Narrow(d, offset, s));
    offset += s;
  }
  return WrapOutputs(std::move(pieces), MakeNode<SplitBackward>({&x}, x.shape(), sizes, d));
}

}  // namespace psync::autograd
