#include "rope.h"

#include <cmath>
#include <vector>

#include "host_loop.h"

namespace llama {
namespace {

using psync::autograd::MakeNode;
using psync::autograd::SingleOutputNode;

// Rotates every (i, i + half) pair of x [B, T, H, D] (contiguous) by angle
// `sign` * t * theta^(-2i/D) into y. The angles are computed in double and
// cos/sin rounded once to T (the reference script does the same).
template <typename T>
void RotatePairs(const T* x, T* y, const Shape& s, double theta, double sign) {
  const int64_t B = s[0], Tn = s[1], H = s[2], D = s[3], half = D / 2;
  std::vector<T> cs(static_cast<size_t>(Tn * half)), sn(cs.size());
  for (int64_t t = 0; t < Tn; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(t) / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(D));
      cs[t * half + i] = static_cast<T>(std::cos(a));
      sn[t * half + i] = static_cast<T>(sign * std::sin(a));
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < Tn; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = ((b * Tn + t) * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const T c = cs[t * half + i], si = sn[t * half + i];
          const T x1 = x[base + i], x2 = x[base + half + i];
          y[base + i] = x1 * c - x2 * si;
          y[base + half + i] = x2 * c + x1 * si;
        }
      }
    }
  }
}

// x (any device) rotated by sign * angle, on x's device.
Tensor Rotate(const Tensor& x, double theta, double sign) {
  const Tensor hx = HostContiguous(x);
  Tensor y = Tensor::Empty(x.shape(), x.dtype());
  DispatchFloat("Rope", x, [&](auto tag) {
    using T = decltype(tag);
    RotatePairs<T>(hx.data<T>(), y.data<T>(), x.shape(), theta, sign);
  });
  return y.To(x.device());
}

class RopeBackward : public SingleOutputNode {
 public:
  explicit RopeBackward(double theta) : SingleOutputNode("RopeBackward", /*saves_tensors=*/false), theta_(theta) {}

 private:
  // y = R(a) x, so dx = R(a)^T g = R(-a) g.
  TensorList Backward(const Tensor& grad) override { return {Rotate(grad, theta_, -1.0)}; }
  const double theta_;
};

}  // namespace

Variable Rope(const Variable& x, double theta) {
  psync::autograd::CheckDefined("Rope", {&x});
  const Tensor& xd = x.data();
  if (xd.dim() != 4 || xd.size(3) % 2 != 0) {
    throw psync::TensorError("Rope: expects x [B, T, H, D] with D even, got " + xd.DebugString());
  }
  if (!(theta > 0) || !std::isfinite(theta)) throw psync::TensorError("Rope: theta must be positive and finite");
  return psync::autograd::Wrap(Rotate(xd, theta, 1.0), MakeNode<RopeBackward>({&x}, theta));
}

}  // namespace llama
