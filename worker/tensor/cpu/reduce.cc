// CPU reductions: sequential, fixed order, double accumulators (see reduce.h).
#include <vector>

#include "worker/tensor/ops/reduce_kernels.h"

namespace psync::ops {
namespace {

class CpuReduce final : public ReduceKernels {
 public:
  void Sum(const Tensor& x, double divisor, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "Sum", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(x.raw_data());
      double s = 0.0;
      for (int64_t i = 0, n = x.numel(); i < n; ++i) s += px[i];
      static_cast<scalar_t*>(y.raw_data())[0] = static_cast<scalar_t>(s / divisor);
    });
  }

  void SumRows(const Tensor& x, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "SumRows", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(x.raw_data());
      scalar_t* py = static_cast<scalar_t*>(y.raw_data());
      const int64_t cols = y.numel(), rows = x.numel() / cols;
      // Per column, rows in order: walking row by row keeps memory access
      // contiguous without changing any column's summation order.
      std::vector<double> acc(static_cast<size_t>(cols), 0.0);
      for (int64_t i = 0; i < rows; ++i) {
        const scalar_t* xr = px + i * cols;
        for (int64_t j = 0; j < cols; ++j) acc[j] += xr[j];
      }
      for (int64_t j = 0; j < cols; ++j) py[j] = static_cast<scalar_t>(acc[j]);
    });
  }
};

}  // namespace

const ReduceKernels& CpuReduceKernels() {
  static const CpuReduce kernels;
  return kernels;
}

}  // namespace psync::ops
