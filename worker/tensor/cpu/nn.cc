// CPU softmax and cross-entropy. Row sums in double, columns in order (the
// CUDA kernels use the same order, so results match closely).
#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/tensor/ops/nn_kernels.h"

namespace psync::ops {
namespace {

// log(sum_j exp(x_j - max)) + max for one row.
template <typename T>
double RowLogSumExp(const T* x, int64_t cols) {
  T mx = x[0];
  for (int64_t j = 1; j < cols; ++j) mx = std::max(mx, x[j]);
  double s = 0.0;
  for (int64_t j = 0; j < cols; ++j) s += std::exp(static_cast<double>(x[j]) - mx);
  return std::log(s) + mx;
}

int64_t Target(const int64_t* targets, int64_t row, int64_t cols, const char* op) {
  const int64_t c = targets[row];
  if (c < 0 || c >= cols) {
    throw TensorError(absl::StrCat(op, ": target ", c, " at row ", row, " is not a class index in [0, ", cols, ")"));
  }
  return c;
}

class CpuNn final : public NnKernels {
 public:
  void LogSoftmax(const Tensor& x, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "LogSoftmax", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(x.raw_data());
      scalar_t* py = static_cast<scalar_t*>(y.raw_data());
      const int64_t rows = x.size(0), cols = x.size(1);
      for (int64_t i = 0; i < rows; ++i) {
        const scalar_t* xr = px + i * cols;
        scalar_t* yr = py + i * cols;
        const double lse = RowLogSumExp(xr, cols);
        for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<scalar_t>(xr[j] - lse);
      }
    });
  }

  void CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& loss) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(logits.dtype(), "CrossEntropy", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(logits.raw_data());
      const int64_t* pt = targets.data<int64_t>();
      const int64_t rows = logits.size(0), cols = logits.size(1);
      double total = 0.0;
      for (int64_t i = 0; i < rows; ++i) {
        const scalar_t* xr = px + i * cols;
        total += RowLogSumExp(xr, cols) - static_cast<double>(xr[Target(pt, i, cols, "CrossEntropy")]);
      }
      static_cast<scalar_t*>(loss.raw_data())[0] = static_cast<scalar_t>(total / static_cast<double>(rows));
    });
  }

  void CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets,
                            const Tensor& dlogits) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(logits.dtype(), "CrossEntropyBackward", [&] {
      const scalar_t* px = static_cast<const scalar_t*>(logits.raw_data());
      const int64_t* pt = targets.data<int64_t>();
      scalar_t* py = static_cast<scalar_t*>(dlogits.raw_data());
      const int64_t rows = logits.size(0), cols = logits.size(1);
      const double g = static_cast<double>(static_cast<const scalar_t*>(grad.raw_data())[0]) / static_cast<double>(rows);
      for (int64_t i = 0; i < rows; ++i) {
        const scalar_t* xr = px + i * cols;
        scalar_t* yr = py + i * cols;
        const int64_t c = Target(pt, i, cols, "CrossEntropyBackward");
        const double lse = RowLogSumExp(xr, cols);
        for (int64_t j = 0; j < cols; ++j) {
          const double p = std::exp(static_cast<double>(xr[j]) - lse) - (j == c ? 1.0 : 0.0);
          yr[j] = static_cast<scalar_t>(g * p);
        }
      }
    });
  }
};

}  // namespace

const NnKernels& CpuNnKernels() {
  static const CpuNn kernels;
  return kernels;
}

}  // namespace psync::ops
