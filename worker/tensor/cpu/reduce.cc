// CPU reductions: sequential, fixed order, double accumulators (see reduce.h).
#include <algorithm>
#include <vector>

#include "worker/tensor/cpu/vec_math.h"
#include "worker/tensor/ops/reduce_kernels.h"

namespace psync::ops {
namespace {

using cpu::Load;

// SumRows' order (reduce_kernels.h): per chunk of rows, each column's rows
// in order; then the chunk sums in order. Walking row by row keeps memory
// access contiguous without changing any column's order. Compiled for
// AVX-512 and AVX2 too (PSYNC_CPU_CLONES: the same adds in the same order).
template <typename S>
PSYNC_CPU_CLONES void SumRowsInOrder(const S* px, int64_t rows, int64_t cols, double* total, double* part,
                                     MathType<S>* py) {
  for (int64_t j = 0; j < cols; ++j) total[j] = 0.0;
  for (int64_t r0 = 0; r0 < rows; r0 += kSumRowsChunk) {
    for (int64_t j = 0; j < cols; ++j) part[j] = 0.0;
    for (int64_t i = r0; i < std::min(rows, r0 + kSumRowsChunk); ++i) {
      const S* xr = px + i * cols;
      for (int64_t j = 0; j < cols; ++j) part[j] += Load<double>(xr[j]);
    }
    for (int64_t j = 0; j < cols; ++j) total[j] += part[j];
  }
  for (int64_t j = 0; j < cols; ++j) py[j] = static_cast<MathType<S>>(total[j]);
}

class CpuReduce final : public ReduceKernels {
 public:
  void Sum(const Tensor& x, double divisor, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(x.dtype(), "Sum", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(x.raw_data());
      double s = 0.0;
      for (int64_t i = 0, n = x.numel(); i < n; ++i) s += Load<double>(px[i]);
      static_cast<math_t*>(y.raw_data())[0] = static_cast<math_t>(s / divisor);
    });
  }

  void SumRows(const Tensor& x, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(x.dtype(), "SumRows", [&] {
      const int64_t cols = y.numel(), rows = x.numel() / cols;
      std::vector<double> total(static_cast<size_t>(cols)), part(static_cast<size_t>(cols));
      SumRowsInOrder(static_cast<const scalar_t*>(x.raw_data()), rows, cols, total.data(), part.data(),
                     static_cast<math_t*>(y.raw_data()));
    });
  }

  void SumOfSquares(const Tensor& x, const Tensor& out) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(x.dtype(), "SumOfSquares", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(x.raw_data());
      const int64_t n = x.numel();
      // Only lanes below n get elements; the others stay zero and add
      // nothing (sums of squares are never -0), so they are skipped.
      const int64_t active = n < kSquaresLanes ? n : kSquaresLanes;
      std::vector<double> lane(static_cast<size_t>(active), 0.0);
      for (int64_t base = 0; base < n; base += kSquaresLanes) {
        const int64_t len = n - base < kSquaresLanes ? n - base : kSquaresLanes;
        const scalar_t* xr = px + base;
        for (int64_t j = 0; j < len; ++j) {
          const double v = Load<double>(xr[j]);
          lane[j] += v * v;
        }
      }
      double block[kSquaresBlocks] = {};
      double tree[kSquaresBlockLanes];
      for (int64_t b = 0; b * kSquaresBlockLanes < active; ++b) {
        const int64_t first = b * kSquaresBlockLanes;
        for (int64_t t = 0; t < kSquaresBlockLanes; ++t) tree[t] = first + t < active ? lane[first + t] : 0.0;
        for (int s = kSquaresBlockLanes / 2; s > 0; s >>= 1) {
          for (int t = 0; t < s; ++t) tree[t] += tree[t + s];
        }
        block[b] = tree[0];
      }
      for (int s = kSquaresBlocks / 2; s > 0; s >>= 1) {
        for (int t = 0; t < s; ++t) block[t] += block[t + s];
      }
      *static_cast<double*>(out.raw_data()) = block[0];
    });
  }
};

}  // namespace

const ReduceKernels& CpuReduceKernels() {
  static const CpuReduce kernels;
  return kernels;
}

}  // namespace psync::ops
