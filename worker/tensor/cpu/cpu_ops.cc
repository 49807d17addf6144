#include "worker/tensor/cpu/cpu_ops.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "worker/tensor/tensor.h"

namespace psync::cpu_ops {

namespace {

int ToBlasInt(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw TensorError("Matmul: dimension " + std::string(what) + "=" + std::to_string(v) +
                      " does not fit the BLAS int");
  }
  return static_cast<int>(v);
}

// Class index held in a float label; throws when it is not one.
int64_t LabelIndex(float label, int64_t row, int64_t cols, const char* op) {
  const double l = label;
  if (!(l >= 0) || l >= static_cast<double>(cols) || std::floor(l) != l) {
    throw TensorError(std::string(op) + ": label " + std::to_string(label) + " at row " +
                      std::to_string(row) + " is not a class index in [0, " +
                      std::to_string(cols) + ")");
  }
  return static_cast<int64_t>(l);
}

// log(sum_j exp(x_j - max)) + max for one row, summed in double in column
// order (the CUDA kernels use the same order, so results match closely).
double RowLogSumExp(const float* x, int64_t cols) {
  float mx = x[0];
  for (int64_t j = 1; j < cols; ++j) mx = std::max(mx, x[j]);
  double s = 0.0;
  for (int64_t j = 0; j < cols; ++j) s += std::exp(static_cast<double>(x[j]) - mx);
  return std::log(s) + mx;
}

}  // namespace

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
          const float* b, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // empty inner dimension: the product is all zeros
    Fill(c, m * n, 0.0f);
    return;
  }
  const int M = ToBlasInt(m, "m"), N = ToBlasInt(n, "n"), K = ToBlasInt(k, "k");
  // Row-major leading dimensions of the matrices as stored.
  const int lda = trans_a ? M : K;
  const int ldb = trans_b ? K : N;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, N);
}

void Add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
void Sub(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] - b[i];
}
void Mul(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}
void Fill(float* y, int64_t n, float value) { std::fill(y, y + n, value); }
void Scale(const float* x, float* y, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}
void Axpy(float alpha, const float* x, float* y, int64_t n) {
  // A plain loop rather than cblas_saxpy: one rounding per element either
  // way, and the result cannot depend on OpenBLAS's kernel choice.
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
void AddBias(const float* x, const float* bias, float* y, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * cols;
    float* yr = y + i * cols;
    for (int64_t j = 0; j < cols; ++j) yr[j] = xr[j] + bias[j];
  }
}
void SumRows(const float* x, float* y, int64_t rows, int64_t cols) {
  // Per column, rows in order, in double: walking row by row keeps memory
  // access contiguous without changing any column's summation order.
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * cols;
    for (int64_t j = 0; j < cols; ++j) acc[j] += xr[j];
  }
  for (int64_t j = 0; j < cols; ++j) y[j] = static_cast<float>(acc[j]);
}
void Relu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
void ReluBackward(const float* grad, const float* out, float* y, int64_t n) {
  // grad[i] is loaded unconditionally: a load only on one side of the select
  // keeps GCC from vectorizing (it cannot speculate it), leaving a scalar
  // loop with a mispredicted branch per element. Same result either way.
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    y[i] = out[i] > 0.0f ? g : 0.0f;
  }
}
double SumDouble(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}
void LogSoftmax(const float* x, float* y, int64_t rows, int64_t cols) {
  if (cols == 0) return;
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * cols;
    float* yr = y + i * cols;
    const double lse = RowLogSumExp(xr, cols);
    for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<float>(xr[j] - lse);
  }
}
float CrossEntropy(const float* logits, const float* labels, int64_t rows, int64_t cols) {
  double total = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = logits + i * cols;
    const int64_t c = LabelIndex(labels[i], i, cols, "CrossEntropy");
    total += RowLogSumExp(xr, cols) - static_cast<double>(xr[c]);
  }
  return static_cast<float>(total / static_cast<double>(rows));
}
void CrossEntropyBackward(float grad, const float* logits, const float* labels, float* y,
                          int64_t rows, int64_t cols) {
  const double g = static_cast<double>(grad) / static_cast<double>(rows);
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = logits + i * cols;
    float* yr = y + i * cols;
    const int64_t c = LabelIndex(labels[i], i, cols, "CrossEntropyBackward");
    const double lse = RowLogSumExp(xr, cols);
    for (int64_t j = 0; j < cols; ++j) {
      const double p = std::exp(static_cast<double>(xr[j]) - lse) - (j == c ? 1.0 : 0.0);
      yr[j] = static_cast<float>(g * p);
    }
  }
}

}  // namespace psync::cpu_ops
