#include "rms_norm.h"

#include <cmath>
#include <utility>
#include <vector>

#include "host_loop.h"

namespace llama {
namespace {

using psync::autograd::MakeNode;
using psync::autograd::SingleOutputNode;

// Forward, per row of C: r = 1 / sqrt(mean(x^2) + eps) (the sum in double),
// kept for the backward; y = (x * r) * w, the order torch's reference rounds in.
template <typename T>
void RmsNormRows(const T* x, const T* w, T* y, T* rstd, int64_t rows, int64_t C, double eps) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* xi = x + i * C;
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(xi[c]) * xi[c];
    const T r = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(C) + eps));
    rstd[i] = r;
    for (int64_t c = 0; c < C; ++c) y[i * C + c] = (xi[c] * r) * w[c];
  }
}

// Backward, per row, with n = x * r (the normalised row):
//   dx = r * (g*w - n * mean(g*w*n))      dw = sum over rows of g*n
// (from dy_i/dx_j = w_i r (delta_ij - n_i n_j / C)). Sums in double.
template <typename T>
void RmsNormBackwardRows(const T* g, const T* x, const T* w, const T* rstd, T* dx, std::vector<double>& dw,
                         int64_t rows, int64_t C) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* gi = g + i * C;
    const T* xi = x + i * C;
    const double r = rstd[i];
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(gi[c]) * w[c] * (xi[c] * r);
    const double m = dot / static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double n = xi[c] * r;
      if (dx) dx[i * C + c] = static_cast<T>(r * (static_cast<double>(gi[c]) * w[c] - n * m));
      dw[c] += gi[c] * n;
    }
  }
}

class RmsNormBackward : public SingleOutputNode {
 public:
  RmsNormBackward() : SingleOutputNode("RmsNormBackward", /*saves_tensors=*/true) {}
  Tensor x, weight, rstd;  // host, contiguous: x [rows*C], weight [C], rstd [rows]
  Device device;           // where x lives (the gradients go back there)

 private:
  TensorList Backward(const Tensor& grad) override {
    const Tensor g = HostContiguous(grad);
    const int64_t C = weight.numel(), rows = rstd.numel();
    Tensor dx = needs_grad(0) ? Tensor::Empty(x.shape(), x.dtype()) : Tensor();
    Tensor dw = Tensor::Empty({C}, weight.dtype());
    DispatchFloat("RmsNormBackward", x, [&](auto tag) {
      using T = decltype(tag);
      std::vector<double> acc(static_cast<size_t>(C), 0.0);
      RmsNormBackwardRows<T>(g.data<T>(), x.data<T>(), weight.data<T>(), rstd.data<T>(),
                             dx.defined() ? dx.data<T>() : nullptr, acc, rows, C);
      for (int64_t c = 0; c < C; ++c) dw.data<T>()[c] = static_cast<T>(acc[static_cast<size_t>(c)]);
    });
    return {dx.defined() ? dx.To(device) : Tensor(), needs_grad(1) ? dw.To(device) : Tensor()};
  }
  void ReleaseSaved() override { x = weight = rstd = Tensor(); }
};

}  // namespace

Variable RmsNorm(const Variable& x, const Variable& weight, double eps) {
  psync::autograd::CheckDefined("RmsNorm", {&x, &weight});
  const Tensor& xd = x.data();
  if (xd.dim() < 1 || xd.size(-1) < 1 || weight.shape() != Shape{xd.size(-1)} || weight.data().dtype() != xd.dtype()) {
    throw psync::TensorError("RmsNorm: x " + xd.DebugString() +
                             " needs a weight [C] of its dtype over its last dim, got " + weight.data().DebugString());
  }
  const int64_t C = xd.size(-1), rows = xd.numel() / C;
  Tensor hx = HostContiguous(xd), hw = HostContiguous(weight.data());
  Tensor y = Tensor::Empty(xd.shape(), xd.dtype()), rstd = Tensor::Empty({rows}, xd.dtype());
  DispatchFloat("RmsNorm", xd, [&](auto tag) {
    using T = decltype(tag);
    RmsNormRows<T>(hx.data<T>(), hw.data<T>(), y.data<T>(), rstd.data<T>(), rows, C, eps);
  });
  auto node = MakeNode<RmsNormBackward>({&x, &weight});
  if (node) {
    node->x = hx;
    node->weight = hw;
    node->rstd = rstd;
    node->device = xd.device();
  }
  return psync::autograd::Wrap(y.To(xd.device()), node);
}

}  // namespace llama
