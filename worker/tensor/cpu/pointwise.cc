// CPU elementwise kernels. Plain loops the compiler vectorizes (see the
// note in worker/tensor/CMakeLists.txt); one rounding per element, so the
// results equal the CUDA kernels' and do not depend on vector width.
#include "worker/tensor/ops/pointwise_kernels.h"

namespace psync::ops {
namespace {

class CpuPointwise final : public PointwiseKernels {
 public:
  void Binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "Binary", [&] {
      const scalar_t* pa = static_cast<const scalar_t*>(a.raw_data());
      const scalar_t* pb = static_cast<const scalar_t*>(b.raw_data());
      scalar_t* py = static_cast<scalar_t*>(y.raw_data());
      const int64_t n = y.numel();
      switch (op) {
        case BinaryOp::kAdd: for (int64_t i = 0; i < n; ++i) py[i] = pa[i] + pb[i]; break;
        case BinaryOp::kSub: for (int64_t i = 0; i < n; ++i) py[i] = pa[i] - pb[i]; break;
        case BinaryOp::kMul: for (int64_t i = 0; i < n; ++i) py[i] = pa[i] * pb[i]; break;
      }
    });
  }

  void Scale(const Tensor& x, double s, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "Scale", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(x.raw_data());
      scalar_t* py = static_cast<scalar_t*>(y.raw_data());
      const scalar_t f = static_cast<scalar_t>(s);
      for (int64_t i = 0, n = y.numel(); i < n; ++i) py[i] = px[i] * f;
    });
  }

  void Axpy(double alpha, const Tensor& x, const Tensor& y) const override {
    // A plain loop rather than BLAS axpy: one rounding per element either
    // way, and the result cannot depend on OpenBLAS's kernel choice.
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "Axpy", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(x.raw_data());
      scalar_t* py = static_cast<scalar_t*>(y.raw_data());
      const scalar_t a = static_cast<scalar_t>(alpha);
      for (int64_t i = 0, n = y.numel(); i < n; ++i) py[i] += a * px[i];
    });
  }

  void AddBias(const Tensor& x, const Tensor& bias, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "AddBias", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(x.raw_data());
      const scalar_t* pb = static_cast<const scalar_t*>(bias.raw_data());
      scalar_t* py = static_cast<scalar_t*>(y.raw_data());
      const int64_t cols = bias.numel(), rows = y.numel() / cols;
      for (int64_t i = 0; i < rows; ++i) {
        const scalar_t* xr = px + i * cols;
        scalar_t* yr = py + i * cols;
        for (int64_t j = 0; j < cols; ++j) yr[j] = xr[j] + pb[j];
      }
    });
  }

  void Relu(const Tensor& x, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "Relu", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(x.raw_data());
      scalar_t* py = static_cast<scalar_t*>(y.raw_data());
      for (int64_t i = 0, n = y.numel(); i < n; ++i) py[i] = px[i] > scalar_t(0) ? px[i] : scalar_t(0);
    });
  }

  void ReluBackward(const Tensor& grad, const Tensor& out, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "ReluBackward", [&] {
      const scalar_t* pg = static_cast<const scalar_t*>(grad.raw_data());
      const scalar_t* po = static_cast<const scalar_t*>(out.raw_data());
      scalar_t* py = static_cast<scalar_t*>(y.raw_data());
      // grad[i] is loaded unconditionally: a load on one side of the select
      // only keeps GCC from vectorizing (it cannot speculate it), leaving a
      // scalar loop with a mispredicted branch per element.
      for (int64_t i = 0, n = y.numel(); i < n; ++i) {
        const scalar_t g = pg[i];
        py[i] = po[i] > scalar_t(0) ? g : scalar_t(0);
      }
    });
  }

  void FillFromScalar(const Tensor& scalar, double scale, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "Expand", [&] {
      const scalar_t v = static_cast<const scalar_t*>(scalar.raw_data())[0] * static_cast<scalar_t>(scale);
      scalar_t* py = static_cast<scalar_t*>(y.raw_data());
      for (int64_t i = 0, n = y.numel(); i < n; ++i) py[i] = v;
    });
  }
};

}  // namespace

const PointwiseKernels& CpuPointwiseKernels() {
  static const CpuPointwise kernels;
  return kernels;
}

}  // namespace psync::ops
