// CUDA kernels of the neural-network family: softmax and cross-entropy, and
// the GPT's layers (embedding: cuda/nn_embedding.cu).
//
// Softmax/cross-entropy give each row to one thread that walks it in the
// same order as the CPU code (double accumulators): bitwise reproducible,
// and fine for the class counts of MLP training (rows give the parallelism).
//
// The GPT's row-wise layers (LayerNorm, causal softmax) give each row to one
// warp: lanes stride the row (coalesced) and combine their double partial
// sums with a fixed xor-shuffle tree, so results are reproducible run to run
// and equal the CPU's to double round-off. LayerNorm's weight/bias gradients
// are column sums over row chunks in the CPU's exact order (no FMA
// contraction), hence bitwise equal to the CPU's for the same inputs. No
// float atomics anywhere.
#include <cmath>

#include "worker/tensor/cuda/launch.cuh"
#include "worker/tensor/cuda/nn_embedding.h"
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

// ---------------------------------------------------------------- GPT layers

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;  // one warp per row

// Sum over the warp's lanes, the same xor tree every time; every lane gets it.
__device__ double WarpSum(double v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

int RowBlocks(int64_t rows) { return static_cast<int>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// LayerNorm forward: x, y [rows, c]; weight, bias [c]; mean, rstd [rows].
// Same math as the CPU (cpu/nn.cc): two passes in double, xhat from the
// rounded mean and rstd.
__global__ void LayerNormKernel(const float* x, const float* weight, const float* bias, double eps, int64_t rows,
                                int c, float* y, float* mean, float* rstd) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const float* xr = x + r * c;
  float* yr = y + r * c;
  double s = 0.0;
  for (int j = lane; j < c; j += kWarp) s += xr[j];
  const double inv_c = 1.0 / c;  // as the CPU: times the reciprocal
  const double m = WarpSum(s) * inv_c;
  double v = 0.0;
  for (int j = lane; j < c; j += kWarp) {
    const double d = xr[j] - m;
    v += d * d;
  }
  const double var = WarpSum(v) * inv_c;
  const float mt = static_cast<float>(m), rt = static_cast<float>(1.0 / sqrt(var + eps));
  if (lane == 0) {
    mean[r] = mt;
    rstd[r] = rt;
  }
  for (int j = lane; j < c; j += kWarp) yr[j] = __fadd_rn(__fmul_rn(__fmul_rn(xr[j] - mt, rt), weight[j]), bias[j]);
}

// LayerNorm backward, dx: one warp per row.
__global__ void LayerNormDxKernel(const float* grad, const float* x, const float* weight, const float* mean,
                                  const float* rstd, int64_t rows, int c, float* dx) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const float* gr = grad + r * c;
  const float* xr = x + r * c;
  const float m = mean[r], rs = rstd[r];
  double sgw = 0.0, sgwx = 0.0;
  for (int j = lane; j < c; j += kWarp) {
    const double gw = static_cast<double>(gr[j]) * weight[j];
    sgw += gw;
    sgwx += gw * static_cast<double>((xr[j] - m) * rs);
  }
  // The CPU's elementwise float formula, without FMA contraction.
  const double inv_c = 1.0 / c;
  const float a = static_cast<float>(WarpSum(sgw) * inv_c), b = static_cast<float>(WarpSum(sgwx) * inv_c);
  for (int j = lane; j < c; j += kWarp) {
    const float xh = __fmul_rn(xr[j] - m, rs);
    dx[r * c + j] = __fmul_rn(rs, __fsub_rn(__fsub_rn(__fmul_rn(gr[j], weight[j]), a), __fmul_rn(xh, b)));
  }
}

// LayerNorm backward, weight/bias: per chunk of kLayerNormRowChunk rows and
// column j, the sums of grad * xhat and grad in row order (no FMA: the
// CPU's exact roundings) into part_w/part_b [chunks, c].
__global__ void LayerNormChunkSumsKernel(const float* grad, const float* x, const float* mean, const float* rstd,
                                         int64_t rows, int c, double* part_w, double* part_b) {
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const int64_t chunk = blockIdx.x, r0 = chunk * kLayerNormRowChunk;
  const int64_t r1 = min(rows, r0 + kLayerNormRowChunk);
  double pw = 0.0, pb = 0.0;
  for (int64_t r = r0; r < r1; ++r) {
    const double g = grad[r * c + j];
    const double xh = __fmul_rn(x[r * c + j] - mean[r], rstd[r]);
    pw = __dadd_rn(pw, __dmul_rn(g, xh));
    pb = __dadd_rn(pb, g);
  }
  part_w[chunk * c + j] = pw;
  part_b[chunk * c + j] = pb;
}

// Column j: the chunk sums in chunk order.
__global__ void LayerNormChunkTotalKernel(const double* part_w, const double* part_b, int64_t chunks, int c,
                                          float* dweight, float* dbias) {
  PSYNC_GRID_STRIDE(j, c) {
    double tw = 0.0, tb = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      tw = __dadd_rn(tw, part_w[k * c + j]);
      tb = __dadd_rn(tb, part_b[k * c + j]);
    }
    dweight[j] = static_cast<float>(tw);
    dbias[j] = static_cast<float>(tb);
  }
}

// GELU, tanh form, as x / (1 + exp(-2u)) (see cpu/nn.cc).
constexpr float kGeluK = 0.79788456080286535588f, kGeluC = 0.044715f;

__global__ void GeluKernel(const float* x, float* y, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) {
    const float v = x[i];
    const float u = kGeluK * (v + kGeluC * v * v * v);
    y[i] = v / (1.0f + expf(-2.0f * u));
  }
}

__global__ void GeluBackwardKernel(const float* grad, const float* x, float* dx, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) {
    const float v = x[i];
    const float u = kGeluK * (v + kGeluC * v * v * v);
    const float s = 1.0f / (1.0f + expf(-2.0f * u));
    const float du = kGeluK * (1.0f + 3.0f * kGeluC * v * v);
    dx[i] = grad[i] * (s + 2.0f * v * s * (1.0f - s) * du);
  }
}

// Causal softmax: x, y [rows, t], row r the query position i = r % t; one
// warp per row. exp(z - max) is kept in y, then divided by the double sum.
__global__ void CausalSoftmaxKernel(const float* x, float scale, int64_t rows, int t, float* y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const float* xr = x + r * t;
  float* yr = y + r * t;
  const int n = static_cast<int>(r % t) + 1;
  float mx = -INFINITY;
  for (int j = lane; j < n; j += kWarp) mx = fmaxf(mx, xr[j] * scale);
  mx = WarpMax(mx);
  double s = 0.0;
  for (int j = lane; j < n; j += kWarp) {
    const float e = expf(__fsub_rn(__fmul_rn(xr[j], scale), mx));  // z rounded first, as on the CPU (no FMA)
    yr[j] = e;
    s += e;
  }
  const double sum = WarpSum(s);
  for (int j = lane; j < n; j += kWarp) yr[j] = static_cast<float>(yr[j] / sum);  // this lane's own writes
  for (int j = n + lane; j < t; j += kWarp) yr[j] = 0.0f;
}

__global__ void CausalSoftmaxBackwardKernel(const float* grad, const float* y, double scale, int64_t rows, int t,
                                            float* dx) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const float* gr = grad + r * t;
  const float* yr = y + r * t;
  float* dr = dx + r * t;
  const int n = static_cast<int>(r % t) + 1;
  double s = 0.0;
  for (int j = lane; j < n; j += kWarp) s += static_cast<double>(gr[j]) * yr[j];
  const double dot = WarpSum(s);
  for (int j = lane; j < n; j += kWarp) dr[j] = static_cast<float>(scale * yr[j] * (gr[j] - dot));
  for (int j = n + lane; j < t; j += kWarp) dr[j] = 0.0f;
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

  void Embedding(const Tensor& ids, const Tensor& weight, const Tensor& y) const override {
    cuda::EmbeddingForward(ids, weight, y);
  }

  void EmbeddingBackward(const Tensor& grad, const Tensor& ids, const Tensor& dweight) const override {
    cuda::EmbeddingBackward(grad, ids, dweight);
  }

  void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                 const Tensor& mean, const Tensor& rstd) const override {
    Launch l(y.device().index);
    const int64_t rows = x.size(0);
    LayerNormKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(F(x), F(weight), F(bias), eps, rows, Cols(x), FW(y),
                                                                 FW(mean), FW(rstd));
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void LayerNormBackward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias) const override {
    Launch l(dx.device().index);
    const int64_t rows = x.size(0);
    const int c = Cols(x);
    const int64_t chunks = (rows + kLayerNormRowChunk - 1) / kLayerNormRowChunk;
    LayerNormDxKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(F(grad), F(x), F(weight), F(mean), F(rstd), rows,
                                                                   c, FW(dx));
    PSYNC_CUDA_CHECK(cudaGetLastError());
    // Chunk sums in a pool buffer that lives only on the compute stream.
    double* parts = nullptr;
    PSYNC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&parts),
                                     2 * static_cast<size_t>(chunks) * static_cast<size_t>(c) * sizeof(double),
                                     l.stream));
    double* part_w = parts;
    double* part_b = parts + chunks * c;
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((c + kThreads - 1) / kThreads));
    LayerNormChunkSumsKernel<<<grid, kThreads, 0, l.stream>>>(F(grad), F(x), F(mean), F(rstd), rows, c, part_w,
                                                               part_b);
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) {
      LayerNormChunkTotalKernel<<<BlocksFor(c), kThreads, 0, l.stream>>>(part_w, part_b, chunks, c, FW(dweight),
                                                                          FW(dbias));
      err = cudaGetLastError();
    }
    cudaFreeAsync(parts, l.stream);
    PSYNC_CUDA_CHECK(err);
  }

  void Gelu(const Tensor& x, const Tensor& y) const override {
    Launch l(y.device().index);
    const int64_t n = y.numel();
    GeluKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(F(x), FW(y), n);
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void GeluBackward(const Tensor& grad, const Tensor& x, const Tensor& dx) const override {
    Launch l(dx.device().index);
    const int64_t n = dx.numel();
    GeluBackwardKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(F(grad), F(x), FW(dx), n);
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void CausalSoftmax(const Tensor& x, double scale, const Tensor& y) const override {
    Launch l(y.device().index);
    const int64_t rows = x.size(0);
    CausalSoftmaxKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(F(x), static_cast<float>(scale), rows, Cols(x),
                                                                     FW(y));
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void CausalSoftmaxBackward(const Tensor& grad, const Tensor& y, double scale, const Tensor& dx) const override {
    Launch l(dx.device().index);
    const int64_t rows = y.size(0);
    // The scale the forward used (float), as on the CPU.
    const double s = static_cast<double>(static_cast<float>(scale));
    CausalSoftmaxBackwardKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(F(grad), F(y), s, rows, Cols(y), FW(dx));
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

 private:
  // Row length as int (the kernels index within a row with int).
  static int Cols(const Tensor& t) {
    if (t.size(1) > (int64_t{1} << 30)) throw TensorError("nn kernels: rows longer than 2^30 elements are not supported on CUDA");
    return static_cast<int>(t.size(1));
  }
};

}  // namespace

const NnKernels& CudaNnKernels() {
  static const CudaNn kernels;
  return kernels;
}

}  // namespace psync::ops
