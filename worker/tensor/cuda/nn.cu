// CUDA kernels of the neural-network family (softmax, cross-entropy).
//
// Row-wise kernels give each row to one thread that walks it in the same
// order as the CPU code (double accumulators): bitwise reproducible, and
// fine for the class counts of MLP training (rows give the parallelism).
#include <cmath>

#include "worker/tensor/cuda/launch.cuh"
#include "worker/tensor/ops/nn_kernels.h"

namespace psync::ops {
namespace {

using cuda::BlocksFor;
using cuda::kThreads;
using cuda::Launch;

constexpr int kReduceThreads = 1024;

// log(sum_j exp(x_j - max)) + max, in double, columns in order (as on CPU).
__device__ double RowLogSumExp(const float* x, int64_t cols) {
  float mx = x[0];
  for (int64_t j = 1; j < cols; ++j) mx = fmaxf(mx, x[j]);
  double s = 0.0;
  for (int64_t j = 0; j < cols; ++j) s += exp(static_cast<double>(x[j]) - mx);
  return log(s) + mx;
}

__global__ void LogSoftmaxKernel(const float* x, float* y, int64_t rows, int64_t cols) {
  PSYNC_GRID_STRIDE(i, rows) {
    const float* xr = x + i * cols;
    float* yr = y + i * cols;
    const double lse = RowLogSumExp(xr, cols);
    for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<float>(xr[j] - lse);
  }
}

// Per-row losses; a target out of range gives NaN (a kernel cannot throw).
__global__ void CrossEntropyRowsKernel(const float* logits, const int64_t* targets, double* loss, int64_t rows,
                                       int64_t cols) {
  PSYNC_GRID_STRIDE(i, rows) {
    const float* xr = logits + i * cols;
    const int64_t c = targets[i];
    loss[i] = (c < 0 || c >= cols) ? nan("") : RowLogSumExp(xr, cols) - static_cast<double>(xr[c]);
  }
}

// out[0] = sum(loss) / rows: one block, fixed tree (deterministic).
__global__ void MeanKernel(const double* x, int64_t n, float* out) {
  __shared__ double partial[kReduceThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kReduceThreads) acc += x[i];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kReduceThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<float>(partial[0] / static_cast<double>(n));
}

__global__ void CrossEntropyBackwardKernel(const float* grad, const float* logits, const int64_t* targets, float* y,
                                           int64_t rows, int64_t cols) {
  const double g = static_cast<double>(grad[0]) / static_cast<double>(rows);
  PSYNC_GRID_STRIDE(i, rows) {
    const float* xr = logits + i * cols;
    float* yr = y + i * cols;
    const int64_t c = targets[i];
    const bool bad = c < 0 || c >= cols;
    const double lse = RowLogSumExp(xr, cols);
    for (int64_t j = 0; j < cols; ++j) {
      const double p = exp(static_cast<double>(xr[j]) - lse) - (j == c ? 1.0 : 0.0);
      yr[j] = bad ? nanf("") : static_cast<float>(g * p);
    }
  }
}

const float* F(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }
float* FW(const Tensor& t) { return static_cast<float*>(t.raw_data()); }
const int64_t* I(const Tensor& t) { return static_cast<const int64_t*>(t.raw_data()); }

class CudaNn final : public NnKernels {
 public:
  void LogSoftmax(const Tensor& x, const Tensor& y) const override {
    Launch l(y.device().index);
    const int64_t rows = x.size(0), cols = x.size(1);
    LogSoftmaxKernel<<<BlocksFor(rows), kThreads, 0, l.stream>>>(F(x), FW(y), rows, cols);
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& loss) const override {
    Launch l(loss.device().index);
    const int64_t rows = logits.size(0), cols = logits.size(1);
    // Per-row losses in a pool buffer that lives only on the compute stream.
    double* per_row = nullptr;
    PSYNC_CUDA_CHECK(
        cudaMallocAsync(reinterpret_cast<void**>(&per_row), static_cast<size_t>(rows) * sizeof(double), l.stream));
    CrossEntropyRowsKernel<<<BlocksFor(rows), kThreads, 0, l.stream>>>(F(logits), I(targets), per_row, rows, cols);
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) {
      MeanKernel<<<1, kReduceThreads, 0, l.stream>>>(per_row, rows, FW(loss));
      err = cudaGetLastError();
    }
    cudaFreeAsync(per_row, l.stream);
    PSYNC_CUDA_CHECK(err);
  }

  void CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets,
                            const Tensor& dlogits) const override {
    Launch l(dlogits.device().index);
    const int64_t rows = logits.size(0), cols = logits.size(1);
    CrossEntropyBackwardKernel<<<BlocksFor(rows), kThreads, 0, l.stream>>>(F(grad), F(logits), I(targets),
                                                                            FW(dlogits), rows, cols);
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace

const NnKernels& CudaNnKernels() {
  static const CudaNn kernels;
  return kernels;
}

}  // namespace psync::ops
