#include "repeat_kv.h"

#include <utility>

#include "host_loop.h"

namespace llama {
namespace {

using psync::autograd::MakeNode;
using psync::autograd::SingleOutputNode;

class RepeatKvBackward : public SingleOutputNode {
 public:
  RepeatKvBackward(Shape x_shape, int64_t groups)
      : SingleOutputNode("RepeatKvBackward", /*saves_tensors=*/false), x_shape_(std::move(x_shape)), groups_(groups) {}

 private:
  TensorList Backward(const Tensor& grad) override {
    const int64_t B = x_shape_[0], T = x_shape_[1], Hkv = x_shape_[2], D = x_shape_[3];
    // grad [B, T, Hkv*G, D] seen as [B, T, Hkv, G, D]: dx = sum over G, in copy order.
    const Tensor g = grad.Contiguous().Reshape({B, T, Hkv, groups_, D});
    Tensor dx = g.Narrow(3, 0, 1).Clone();  // [B, T, Hkv, 1, D], contiguous
    for (int64_t k = 1; k < groups_; ++k) psync::ops::AddInPlace(dx, g.Narrow(3, k, 1));
    return {dx.Reshape(x_shape_)};
  }
  const Shape x_shape_;
  const int64_t groups_;
};

}  // namespace

Variable RepeatKv(const Variable& x, int64_t groups) {
  psync::autograd::CheckDefined("RepeatKv", {&x});
  const Tensor& xd = x.data();
  if (xd.dim() != 4 || groups < 1) {
    throw psync::TensorError("RepeatKv: expects x [B, T, Hkv, D] and groups >= 1, got " + xd.DebugString() +
                             " and groups " + std::to_string(groups));
  }
  if (groups == 1) return x;
  const int64_t B = xd.size(0), T = xd.size(1), Hkv = xd.size(2), D = xd.size(3);
  // [B, T, Hkv, G, D]: copy k of every head at index k of the new dim, so
  // flattening (Hkv, G) puts head h's copies at h*G .. h*G+G-1.
  Tensor out = Tensor::Empty({B, T, Hkv, groups, D}, xd.dtype(), xd.device());
  const Tensor src = xd.Reshape({B, T, Hkv, 1, D});
  for (int64_t k = 0; k < groups; ++k) psync::ops::Copy(out.Narrow(3, k, 1), src);
  return psync::autograd::Wrap(out.Reshape({B, T, Hkv * groups, D}),
                               MakeNode<RepeatKvBackward>({&x}, xd.shape(), groups));
}

}  // namespace llama
