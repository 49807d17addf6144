#include "silu.h"

#include <cmath>

#include "host_loop.h"

namespace llama {
namespace {

using psync::autograd::MakeNode;
using psync::autograd::SingleOutputNode;

template <typename T>
void SiluForward(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (T(1) + std::exp(-x[i]));  // torch's form
}

template <typename T>
void SiluBackwardLoop(const T* g, const T* x, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T s = T(1) / (T(1) + std::exp(-x[i]));
    dx[i] = g[i] * (s * (T(1) + x[i] * (T(1) - s)));
  }
}

class SiluBackward : public SingleOutputNode {
 public:
  explicit SiluBackward(Tensor x, Device device)
      : SingleOutputNode("SiluBackward", /*saves_tensors=*/true), x_(std::move(x)), device_(device) {}

 private:
  TensorList Backward(const Tensor& grad) override {
    const Tensor g = HostContiguous(grad);
    Tensor dx = Tensor::Empty(x_.shape(), x_.dtype());
    DispatchFloat("SiluBackward", x_, [&](auto tag) {
      using T = decltype(tag);
      SiluBackwardLoop<T>(g.data<T>(), x_.data<T>(), dx.data<T>(), dx.numel());
    });
    return {dx.To(device_)};
  }
  void ReleaseSaved() override { x_ = Tensor(); }
  Tensor x_;  // the forward's input, host, contiguous
  const Device device_;
};

}  // namespace

Variable Silu(const Variable& x) {
  psync::autograd::CheckDefined("Silu", {&x});
  const Tensor& xd = x.data();
  const Tensor hx = HostContiguous(xd);
  Tensor y = Tensor::Empty(xd.shape(), xd.dtype());
  DispatchFloat("Silu", xd, [&](auto tag) {
    using T = decltype(tag);
    SiluForward<T>(hx.data<T>(), y.data<T>(), y.numel());
  });
  return psync::autograd::Wrap(y.To(xd.device()), MakeNode<SiluBackward>({&x}, hx, xd.device()));
}

}  // namespace llama
