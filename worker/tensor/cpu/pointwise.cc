// CPU elementwise kernels. Plain loops the compiler vectorizes (see the
// note in worker/tensor/CMakeLists.txt); one rounding per element, so the
// results equal the CUDA kernels' and do not depend on vector width.
// dtype-generic: float32, float64 and bfloat16 storage (bfloat16 computed
// in float, dtype.h); for float32 and float64 the loads and stores are the
// identity, so those results are the plain loops' bit for bit.
#include "worker/tensor/cpu/cpu_util.h"
#include "worker/tensor/cpu/vec_math.h"
#include "worker/tensor/ops/pointwise_kernels.h"

namespace psync::ops {
namespace {

using cpu::In;
using cpu::Load;
using cpu::Out;
using cpu::Store;

class CpuPointwise final : public PointwiseKernels {
 public:
  void Binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(y.dtype(), "Binary", [&] {
      const scalar_t* pa = In<scalar_t>(a);
      const scalar_t* pb = In<scalar_t>(b);
      scalar_t* py = Out<scalar_t>(y);
      const int64_t n = y.numel();
      auto run = [&](auto f) {
        for (int64_t i = 0; i < n; ++i) py[i] = Store<scalar_t>(f(Load<math_t>(pa[i]), Load<math_t>(pb[i])));
      };
      switch (op) {
        case BinaryOp::kAdd: run([](math_t u, math_t v) { return u + v; }); break;
        case BinaryOp::kSub: run([](math_t u, math_t v) { return u - v; }); break;
        case BinaryOp::kMul: run([](math_t u, math_t v) { return u * v; }); break;
      }
    });
  }

  void Scale(const Tensor& x, double s, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(y.dtype(), "Scale", [&] {
      const scalar_t* px = In<scalar_t>(x);
      scalar_t* py = Out<scalar_t>(y);
      const math_t f = static_cast<math_t>(s);
      for (int64_t i = 0, n = y.numel(); i < n; ++i) py[i] = Store<scalar_t>(Load<math_t>(px[i]) * f);
    });
  }

  void Axpy(double alpha, const Tensor& x, const Tensor& y) const override {
    // A plain loop rather than BLAS axpy: one rounding per element either
    // way, and the result cannot depend on OpenBLAS's kernel choice.
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(y.dtype(), "Axpy", [&] {
      const scalar_t* px = In<scalar_t>(x);
      scalar_t* py = Out<scalar_t>(y);
      const math_t a = static_cast<math_t>(alpha);
      for (int64_t i = 0, n = y.numel(); i < n; ++i) {
        py[i] = Store<scalar_t>(Load<math_t>(py[i]) + a * Load<math_t>(px[i]));
      }
    });
  }

  void AddBias(const Tensor& x, const Tensor& bias, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(y.dtype(), "AddBias", [&] {
      const scalar_t* px = In<scalar_t>(x);
      const scalar_t* pb = In<scalar_t>(bias);
      scalar_t* py = Out<scalar_t>(y);
      const int64_t cols = bias.numel(), rows = y.numel() / cols;
      for (int64_t i = 0; i < rows; ++i) {
        const scalar_t* xr = px + i * cols;
        scalar_t* yr = py + i * cols;
        for (int64_t j = 0; j < cols; ++j) yr[j] = Store<scalar_t>(Load<math_t>(xr[j]) + Load<math_t>(pb[j]));
      }
    });
  }

  void Relu(const Tensor& x, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(y.dtype(), "Relu", [&] {
      const scalar_t* px = In<scalar_t>(x);
      scalar_t* py = Out<scalar_t>(y);
      for (int64_t i = 0, n = y.numel(); i < n; ++i) {
        const math_t v = Load<math_t>(px[i]);
        py[i] = Store<scalar_t>(v > math_t(0) ? v : math_t(0));
      }
    });
  }

  void ReluBackward(const Tensor& grad, const Tensor& out, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(y.dtype(), "ReluBackward", [&] {
      const scalar_t* pg = In<scalar_t>(grad);
      const scalar_t* po = In<scalar_t>(out);
      scalar_t* py = Out<scalar_t>(y);
      // grad[i] is loaded unconditionally: a load on one side of the select
      // only keeps GCC from vectorizing (it cannot speculate it), leaving a
      // scalar loop with a mispredicted branch per element.
      for (int64_t i = 0, n = y.numel(); i < n; ++i) {
        const math_t g = Load<math_t>(pg[i]);
        py[i] = Store<scalar_t>(Load<math_t>(po[i]) > math_t(0) ? g : math_t(0));
      }
    });
  }

  void FillFromScalar(const Tensor& scalar, double scale, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(y.dtype(), "Expand", [&] {
      const scalar_t v = Store<scalar_t>(Load<math_t>(In<scalar_t>(scalar)[0]) * static_cast<math_t>(scale));
      scalar_t* py = Out<scalar_t>(y);
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
