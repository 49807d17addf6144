// All CUDA kernels of psync_tensor (elementwise, reductions, softmax,
// cross-entropy) and their launchers. Every launch goes on the device's
// compute stream and returns without waiting.
//
// Determinism: reductions never use atomics. SumRows and the row-wise
// softmax/cross-entropy kernels give each row/column to one thread that
// walks it in the same order as the CPU code (double accumulators), and the
// full Sum is a single fixed-shape block tree, so results are bitwise
// reproducible run to run.
#include <cmath>
#include <cstdint>

#include "worker/tensor/cuda/cuda_context.h"
#include "worker/tensor/cuda/cuda_ops.h"

namespace psync::cuda_ops {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;  // grid-stride loops cover the rest
constexpr int kReduceThreads = 1024;

int BlocksFor(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// Sets the device and gives its compute stream for one launch.
struct Launch {
  explicit Launch(int device) : guard(device), stream(cuda::ComputeStream(device)) {}
  cuda::DeviceGuard guard;
  cudaStream_t stream;
};

#define PSYNC_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

__global__ void BinaryKernel(int op, const float* a, const float* b, float* y, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) {
    const float x = a[i], z = b[i];
    y[i] = op == 0 ? x + z : (op == 1 ? x - z : x * z);
  }
}

__global__ void FillKernel(float* y, int64_t n, float v) {
  PSYNC_GRID_STRIDE(i, n) y[i] = v;
}

__global__ void FillFromScalarKernel(float* y, int64_t n, const float* s, float scale) {
  const float v = s[0] * scale;
  PSYNC_GRID_STRIDE(i, n) y[i] = v;
}

__global__ void ScaleKernel(const float* x, float* y, int64_t n, float s) {
  PSYNC_GRID_STRIDE(i, n) y[i] = x[i] * s;
}

__global__ void AxpyKernel(float alpha, const float* x, float* y, int64_t n) {
  // Written as y + alpha*x with no fused multiply-add, to round like the CPU loop.
  PSYNC_GRID_STRIDE(i, n) y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

__global__ void AddBiasKernel(const float* x, const float* bias, float* y, int64_t rows,
                              int64_t cols) {
  PSYNC_GRID_STRIDE(i, rows * cols) y[i] = x[i] + bias[i % cols];
}

__global__ void SumRowsKernel(const float* x, float* y, int64_t rows, int64_t cols) {
  // One thread per column, rows in order, double accumulator: exactly the
  // CPU order. Adjacent threads read adjacent columns, so loads coalesce.
  PSYNC_GRID_STRIDE(j, cols) {
    double acc = 0.0;
    for (int64_t i = 0; i < rows; ++i) acc += x[i * cols + j];
    y[j] = static_cast<float>(acc);
  }
}

__global__ void ReluKernel(const float* x, float* y, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void ReluBackwardKernel(const float* g, const float* out, float* y, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) y[i] = out[i] > 0.0f ? g[i] : 0.0f;
}

// One block of kReduceThreads: each thread sums a fixed strided subset in
// double, then a fixed shared-memory tree. y[0] = total / divisor.
template <typename T>
__global__ void ReduceSumKernel(const T* x, int64_t n, double divisor, float* y) {
  __shared__ double partial[kReduceThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kReduceThreads) acc += static_cast<double>(x[i]);
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kReduceThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = static_cast<float>(partial[0] / divisor);
}

// log(sum_j exp(x_j - max)) + max, in double, columns in order (as on CPU).
__device__ double RowLogSumExp(const float* x, int64_t cols) {
  float mx = x[0];
  for (int64_t j = 1; j < cols; ++j) mx = fmaxf(mx, x[j]);
  double s = 0.0;
  for (int64_t j = 0; j < cols; ++j) s += exp(static_cast<double>(x[j]) - mx);
  return log(s) + mx;
}

// Class index in a float label, or -1 when it is not a valid one.
__device__ int64_t LabelIndex(float label, int64_t cols) {
  const double l = label;
  if (!(l >= 0.0) || l >= static_cast<double>(cols) || floor(l) != l) return -1;
  return static_cast<int64_t>(l);
}

// One thread per row: fine for the class counts of MLP training (tens to
// thousands); rows give the parallelism.
__global__ void LogSoftmaxKernel(const float* x, float* y, int64_t rows, int64_t cols) {
  PSYNC_GRID_STRIDE(i, rows) {
    const float* xr = x + i * cols;
    float* yr = y + i * cols;
    const double lse = RowLogSumExp(xr, cols);
    for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<float>(xr[j] - lse);
  }
}

__global__ void CrossEntropyRowsKernel(const float* logits, const float* labels, double* loss,
                                       int64_t rows, int64_t cols) {
  PSYNC_GRID_STRIDE(i, rows) {
    const float* xr = logits + i * cols;
    const int64_t c = LabelIndex(labels[i], cols);
    loss[i] = c < 0 ? nan("") : RowLogSumExp(xr, cols) - static_cast<double>(xr[c]);
  }
}

__global__ void CrossEntropyBackwardKernel(const float* grad, const float* logits,
                                           const float* labels, float* y, int64_t rows,
                                           int64_t cols) {
  const double g = static_cast<double>(grad[0]) / static_cast<double>(rows);
  PSYNC_GRID_STRIDE(i, rows) {
    const float* xr = logits + i * cols;
    float* yr = y + i * cols;
    const int64_t c = LabelIndex(labels[i], cols);
    const double lse = RowLogSumExp(xr, cols);
    for (int64_t j = 0; j < cols; ++j) {
      const double p = exp(static_cast<double>(xr[j]) - lse) - (j == c ? 1.0 : 0.0);
      yr[j] = c < 0 ? nanf("") : static_cast<float>(g * p);
    }
  }
}

}  // namespace

void Binary(int device, BinaryOp op, const float* a, const float* b, float* y, int64_t n) {
  if (n == 0) return;
  Launch l(device);
  BinaryKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(static_cast<int>(op), a, b, y, n);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void Fill(int device, float* y, int64_t n, float value) {
  if (n == 0) return;
  Launch l(device);
  FillKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(y, n, value);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void FillFromDeviceScalar(int device, float* y, int64_t n, const float* scalar, float scale) {
  if (n == 0) return;
  Launch l(device);
  FillFromScalarKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(y, n, scalar, scale);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void Scale(int device, const float* x, float* y, int64_t n, float s) {
  if (n == 0) return;
  Launch l(device);
  ScaleKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(x, y, n, s);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void Axpy(int device, float alpha, const float* x, float* y, int64_t n) {
  if (n == 0) return;
  Launch l(device);
  AxpyKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(alpha, x, y, n);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void AddBias(int device, const float* x, const float* bias, float* y, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  Launch l(device);
  AddBiasKernel<<<BlocksFor(rows * cols), kThreads, 0, l.stream>>>(x, bias, y, rows, cols);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void SumRows(int device, const float* x, float* y, int64_t rows, int64_t cols) {
  if (cols == 0) return;
  Launch l(device);
  SumRowsKernel<<<BlocksFor(cols), kThreads, 0, l.stream>>>(x, y, rows, cols);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void Relu(int device, const float* x, float* y, int64_t n) {
  if (n == 0) return;
  Launch l(device);
  ReluKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(x, y, n);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void ReluBackward(int device, const float* grad, const float* out, float* y, int64_t n) {
  if (n == 0) return;
  Launch l(device);
  ReluBackwardKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(grad, out, y, n);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void Sum(int device, const float* x, float* y, int64_t n, double divisor) {
  Launch l(device);
  ReduceSumKernel<float><<<1, kReduceThreads, 0, l.stream>>>(x, n, divisor, y);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void LogSoftmax(int device, const float* x, float* y, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  Launch l(device);
  LogSoftmaxKernel<<<BlocksFor(rows), kThreads, 0, l.stream>>>(x, y, rows, cols);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void CrossEntropy(int device, const float* logits, const float* labels, float* out, int64_t rows,
                  int64_t cols) {
  Launch l(device);
  // Per-row losses in a pool buffer that lives only on the compute stream.
  double* loss = nullptr;
  PSYNC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&loss),
                                   static_cast<size_t>(rows) * sizeof(double), l.stream));
  CrossEntropyRowsKernel<<<BlocksFor(rows), kThreads, 0, l.stream>>>(logits, labels, loss, rows,
                                                                      cols);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) {
    ReduceSumKernel<double><<<1, kReduceThreads, 0, l.stream>>>(
        loss, rows, static_cast<double>(rows), out);
    err = cudaGetLastError();
  }
  cudaFreeAsync(loss, l.stream);
  PSYNC_CUDA_CHECK(err);
}

void CrossEntropyBackward(int device, const float* grad, const float* logits, const float* labels,
                          float* y, int64_t rows, int64_t cols) {
  Launch l(device);
  CrossEntropyBackwardKernel<<<BlocksFor(rows), kThreads, 0, l.stream>>>(grad, logits, labels, y,
                                                                          rows, cols);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace psync::cuda_ops
