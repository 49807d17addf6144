// CUDA kernels of the neural-network family: softmax and cross-entropy, and
// the GPT's layers (embedding: cuda/nn_embedding.cu).
//
// Softmax/cross-entropy give each row to one thread that walks it in the
// same order as the CPU code (double accumulators): bitwise reproducible,
// and fine for the class counts of MLP training (rows give the parallelism).
// Cross-entropy over wide rows (a GPT's vocabulary: 50,257 classes) gives
// each row to one warp instead, as the GPT layers below: one thread walking
// 50,257 columns three times took 47 ms of a GPT-2 small step on an H200.
// Equal to the CPU's to double round-off, reproducible run to run.
//
// The GPT's row-wise layers (LayerNorm, causal softmax) give each row to one
// warp: lanes stride the row (coalesced) and combine their double partial
// sums with a fixed xor-shuffle tree, so results are reproducible run to run
// and equal the CPU's to double round-off. LayerNorm's weight/bias gradients
// are column sums over row chunks in the CPU's exact order (no FMA
// contraction), hence bitwise equal to the CPU's for the same inputs.
//
// The CNN's building blocks (ops/nn_conv.cc adds the cuBLAS products): one
// thread per output element everywhere. Col2Im gathers each input
// element's terms in the CPU's order, and max pooling's backward writes each
// element once (windows do not overlap), so both equal the CPU bitwise;
// per-channel bias sums are one block per channel with a fixed tree. No
// float atomics anywhere.
#include <climits>
#include <cmath>

#include "worker/tensor/cuda/gelu.cuh"
#include "worker/tensor/cuda/launch.cuh"
#include "worker/tensor/cuda/nn_embedding.h"
#include "worker/tensor/ops/nn_kernels.h"

namespace psync::ops {
namespace {

using cuda::BlocksFor;
using cuda::kThreads;
using cuda::In;
using cuda::Launch;
using cuda::Out;

constexpr int kReduceThreads = 1024;

using cuda::Load;
using cuda::Store;

// Logits and the GPT's activations are float or __nv_bfloat16 (S below),
// computed in float (cuda/launch.cuh): the float32 kernels are the
// instantiations with S = float, the bits they always had.

// log(sum_j exp(x_j - max)) + max, in double, columns in order (as on CPU).
template <typename S>
__device__ double RowLogSumExp(const S* x, int64_t cols) {
  float mx = Load(x[0]);
  for (int64_t j = 1; j < cols; ++j) mx = fmaxf(mx, Load(x[j]));
  double s = 0.0;
  for (int64_t j = 0; j < cols; ++j) s += exp(static_cast<double>(Load(x[j])) - mx);
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
template <typename S>
__global__ void CrossEntropyRowsKernel(const S* logits, const int64_t* targets, double* loss, int64_t rows,
                                       int64_t cols) {
  PSYNC_GRID_STRIDE(i, rows) {
    const S* xr = logits + i * cols;
    const int64_t c = targets[i];
    loss[i] = (c < 0 || c >= cols) ? nan("") : RowLogSumExp(xr, cols) - static_cast<double>(Load(xr[c]));
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

template <typename S>
__global__ void CrossEntropyBackwardKernel(const float* grad, const S* logits, const int64_t* targets, S* y,
                                           int64_t rows, int64_t cols) {
  const double g = static_cast<double>(grad[0]) / static_cast<double>(rows);
  PSYNC_GRID_STRIDE(i, rows) {
    const S* xr = logits + i * cols;
    S* yr = y + i * cols;
    const int64_t c = targets[i];
    const bool bad = c < 0 || c >= cols;
    const double lse = RowLogSumExp(xr, cols);
    for (int64_t j = 0; j < cols; ++j) {
      const double p = exp(static_cast<double>(Load(xr[j])) - lse) - (j == c ? 1.0 : 0.0);
      yr[j] = Store<S>(bad ? nanf("") : static_cast<float>(g * p));
    }
  }
}

// ---------------------------------------------------------------- warp per row

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;  // one warp per row
// Cross-entropy rows at least this wide take the warp-per-row kernels.
constexpr int64_t kWideRow = 1024;

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

// RowLogSumExp for one warp: lanes stride the row; the max is exact in any
// order, the double sum differs from the CPU's only by round-off.
template <typename S>
__device__ double WarpRowLogSumExp(const S* x, int64_t cols, int lane) {
  float mx = -INFINITY;
  for (int64_t j = lane; j < cols; j += kWarp) mx = fmaxf(mx, Load(x[j]));
  mx = WarpMax(mx);
  double s = 0.0;
  for (int64_t j = lane; j < cols; j += kWarp) s += exp(static_cast<double>(Load(x[j])) - mx);
  return log(WarpSum(s)) + mx;
}

template <typename S>
__global__ void CrossEntropyRowsWideKernel(const S* logits, const int64_t* targets, double* loss, int64_t rows,
                                           int64_t cols) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const S* xr = logits + r * cols;
  const int64_t c = targets[r];
  const double lse = WarpRowLogSumExp(xr, cols, lane);
  if (lane == 0) loss[r] = (c < 0 || c >= cols) ? nan("") : lse - static_cast<double>(Load(xr[c]));
}

template <typename S>
__global__ void CrossEntropyBackwardWideKernel(const float* grad, const S* logits, const int64_t* targets, S* y,
                                               int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const double g = static_cast<double>(grad[0]) / static_cast<double>(rows);
  const S* xr = logits + r * cols;
  S* yr = y + r * cols;
  const int64_t c = targets[r];
  const bool bad = c < 0 || c >= cols;
  const double lse = WarpRowLogSumExp(xr, cols, lane);
  for (int64_t j = lane; j < cols; j += kWarp) {
    const double p = exp(static_cast<double>(Load(xr[j])) - lse) - (j == c ? 1.0 : 0.0);
    yr[j] = Store<S>(bad ? nanf("") : static_cast<float>(g * p));
  }
}

// ---------------------------------------------------------------- fused classifier
// One warp per row with the wide kernels' arithmetic (the max in float, exp
// and the sum in double, a fixed xor tree), so loss and gradient equal
// CrossEntropy's and CrossEntropyBackward's (rows of 1,024 classes or more:
// bitwise): one kernel reads the row for the max, for the sum and for the
// gradient, which it writes over the row; no second [N, C] tensor. float32
// or bfloat16 rows (row stride ld; bfloat16 read as float, written from
// the float of each double result).

template <typename S>
__global__ void FusedClassifierKernel(S* logits, int64_t ld, const int64_t* targets, double* loss, int64_t rows,
                                      int64_t cols, double g) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  S* xr = logits + r * ld;
  const int64_t c = targets[r];
  const bool bad = c < 0 || c >= cols;
  float mx = -INFINITY;
  for (int64_t j = lane; j < cols; j += kWarp) mx = fmaxf(mx, Load(xr[j]));
  mx = WarpMax(mx);
  double s = 0.0;
  for (int64_t j = lane; j < cols; j += kWarp) s += exp(static_cast<double>(Load(xr[j])) - mx);
  const double lse = log(WarpSum(s)) + mx;
  const double xc = bad ? 0.0 : static_cast<double>(Load(xr[c]));
  __syncwarp();  // every lane has read x[target] before any lane writes it
  if (lane == 0) loss[r] = bad ? nan("") : lse - xc;
  for (int64_t j = lane; j < cols; j += kWarp) {
    const double p = exp(static_cast<double>(Load(xr[j])) - lse) - (j == c ? 1.0 : 0.0);
    xr[j] = Store<S>(bad ? nanf("") : static_cast<float>(g * p));
  }
}

// x [rows] (row stride ld) *= grad[0] / scale, unless they are equal (every
// thread reads grad[0] and leaves at once: the usual case costs a launch).
template <typename S>
__global__ void RescaleClassifierKernel(S* x, int64_t ld, int64_t rows, int64_t cols, const float* grad,
                                        float scale) {
  const float g = grad[0];
  if (g == scale) return;
  const double f = static_cast<double>(g) / scale;
  PSYNC_GRID_STRIDE(e, rows * cols) {
    S* p = x + (e / cols) * ld + e % cols;
    *p = Store<S>(static_cast<float>(static_cast<double>(Load(*p)) * f));
  }
}

// ---------------------------------------------------------------- GPT layers

// One warp's LayerNorm of row xr (storage X) into yr (storage Y): same math
// as the CPU (cpu/nn.cc): two passes in double, xhat from the rounded mean
// and rstd.
template <typename X, typename Y>
__device__ void LayerNormWarpRow(const X* xr, const float* weight, const float* bias, double eps, int c, int lane,
                                 Y* yr, float* mean, float* rstd) {
  double s = 0.0;
  for (int j = lane; j < c; j += kWarp) s += Load(xr[j]);
  const double inv_c = 1.0 / c;  // as the CPU: times the reciprocal
  const double m = WarpSum(s) * inv_c;
  double v = 0.0;
  for (int j = lane; j < c; j += kWarp) {
    const double d = Load(xr[j]) - m;
    v += d * d;
  }
  const double var = WarpSum(v) * inv_c;
  const float mt = static_cast<float>(m), rt = static_cast<float>(1.0 / sqrt(var + eps));
  if (lane == 0) {
    *mean = mt;
    *rstd = rt;
  }
  for (int j = lane; j < c; j += kWarp) {
    yr[j] = Store<Y>(__fadd_rn(__fmul_rn(__fmul_rn(Load(xr[j]) - mt, rt), weight[j]), bias[j]));
  }
}

// LayerNorm forward: x, y [rows, c]; weight, bias [c]; mean, rstd [rows].
template <typename X, typename Y>
__global__ void LayerNormKernel(const X* x, const float* weight, const float* bias, double eps, int64_t rows, int c,
                                Y* y, float* mean, float* rstd) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  LayerNormWarpRow(x + r * c, weight, bias, eps, c, lane, y + r * c, mean + r, rstd + r);
}

// Residual add, then LayerNorm: h = x + a (rounded to float, as Add), each
// lane writing and then re-reading its own elements of h.
template <typename A, typename Y>
__global__ void ResidualLayerNormKernel(const float* x, const A* a, const float* weight, const float* bias, double eps,
                                        int64_t rows, int c, float* h, Y* y, float* mean, float* rstd) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  float* hr = h + r * c;
  for (int j = lane; j < c; j += kWarp) hr[j] = __fadd_rn(x[r * c + j], Load(a[r * c + j]));
  LayerNormWarpRow(static_cast<const float*>(hr), weight, bias, eps, c, lane, y + r * c, mean + r, rstd + r);
}

// LayerNorm backward, dx (+ residual_grad): one warp per row.
template <typename G, typename X>
__global__ void LayerNormDxKernel(const G* grad, const X* x, const float* weight, const float* mean,
                                  const float* rstd, const X* residual_grad, int64_t rows, int c, X* dx) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const G* gr = grad + r * c;
  const X* xr = x + r * c;
  const float m = mean[r], rs = rstd[r];
  double sgw = 0.0, sgwx = 0.0;
  for (int j = lane; j < c; j += kWarp) {
    const double gw = static_cast<double>(Load(gr[j])) * weight[j];
    sgw += gw;
    sgwx += gw * static_cast<double>((Load(xr[j]) - m) * rs);
  }
  // The CPU's elementwise float formula, without FMA contraction.
  const double inv_c = 1.0 / c;
  const float a = static_cast<float>(WarpSum(sgw) * inv_c), b = static_cast<float>(WarpSum(sgwx) * inv_c);
  for (int j = lane; j < c; j += kWarp) {
    const float xh = __fmul_rn(Load(xr[j]) - m, rs);
    float v = __fmul_rn(rs, __fsub_rn(__fsub_rn(__fmul_rn(Load(gr[j]), weight[j]), a), __fmul_rn(xh, b)));
    if (residual_grad != nullptr) v = __fadd_rn(v, Load(residual_grad[r * c + j]));
    dx[r * c + j] = Store<X>(v);
  }
}

// LayerNorm backward, weight/bias: per chunk of kLayerNormRowChunk rows and
// column j, the sums of grad * xhat and grad in row order (no FMA: the
// CPU's exact roundings) into part_w/part_b [chunks, c].
template <typename G, typename X>
__global__ void LayerNormChunkSumsKernel(const G* grad, const X* x, const float* mean, const float* rstd, int64_t rows,
                                         int c, double* part_w, double* part_b) {
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const int64_t chunk = blockIdx.x, r0 = chunk * kLayerNormRowChunk;
  const int64_t r1 = min(rows, r0 + kLayerNormRowChunk);
  double pw = 0.0, pb = 0.0;
  for (int64_t r = r0; r < r1; ++r) {
    const double g = Load(grad[r * c + j]);
    const double xh = __fmul_rn(Load(x[r * c + j]) - mean[r], rstd[r]);
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

// GELU, tanh form (cuda/gelu.cuh).
template <typename S>
__global__ void GeluKernel(const S* x, S* y, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) y[i] = Store<S>(cuda::GeluValue(Load(x[i])));
}

template <typename G, typename X>
__global__ void GeluBackwardKernel(const G* grad, const X* x, X* dx, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) dx[i] = Store<X>(Load(grad[i]) * cuda::GeluGrad(Load(x[i])));
}

// Causal softmax: x, y [rows, t], row r the query position i = r % t; one
// warp per row. The scaled score is rounded to the storage type (torch's
// `att * scale` on a bfloat16 tensor; a no-op for float), exp(z - max) is
// summed in double, then recomputed (the same value) and divided.
template <typename S>
__device__ float ScaledScore(S x, float scale) {
  return Load(Store<S>(__fmul_rn(Load(x), scale)));  // z rounded first, as on the CPU (no FMA)
}

template <typename S>
__global__ void CausalSoftmaxKernel(const S* x, float scale, int64_t rows, int t, S* y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const S* xr = x + r * t;
  S* yr = y + r * t;
  const int n = static_cast<int>(r % t) + 1;
  float mx = -INFINITY;
  for (int j = lane; j < n; j += kWarp) mx = fmaxf(mx, ScaledScore(xr[j], scale));
  mx = WarpMax(mx);
  double s = 0.0;
  for (int j = lane; j < n; j += kWarp) s += expf(__fsub_rn(ScaledScore(xr[j], scale), mx));
  const double sum = WarpSum(s);
  for (int j = lane; j < n; j += kWarp) {
    const float e = expf(__fsub_rn(ScaledScore(xr[j], scale), mx));
    yr[j] = Store<S>(static_cast<float>(e / sum));
  }
  for (int j = n + lane; j < t; j += kWarp) yr[j] = Store<S>(0.0f);
}

template <typename S>
__global__ void CausalSoftmaxBackwardKernel(const S* grad, const S* y, double scale, int64_t rows, int t, S* dx) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const S* gr = grad + r * t;
  const S* yr = y + r * t;
  S* dr = dx + r * t;
  const int n = static_cast<int>(r % t) + 1;
  double s = 0.0;
  for (int j = lane; j < n; j += kWarp) s += static_cast<double>(Load(gr[j])) * Load(yr[j]);
  const double dot = WarpSum(s);
  for (int j = lane; j < n; j += kWarp) {
    dr[j] = Store<S>(static_cast<float>(scale * Load(yr[j]) * (Load(gr[j]) - dot)));
  }
  for (int j = n + lane; j < t; j += kWarp) dr[j] = Store<S>(0.0f);
}

// ---------------------------------------------------------------- CNN layers

// col [n, K, L] from x [n, C, H, W] (ops/nn_kernels.h Im2Col); one thread
// per col element, so writes are coalesced along L.
__global__ void Im2ColKernel(const float* x, Conv2dGeometry g, int64_t total, float* col) {
  const int64_t L = g.ho * g.wo, K = g.cin * g.kh * g.kw;
  PSYNC_GRID_STRIDE(e, total) {
    const int64_t l = e % L, k = (e / L) % K, b = e / (L * K);
    const int64_t j = k % g.kw, i = (k / g.kw) % g.kh, c = k / (g.kw * g.kh);
    const int64_t ih = (l / g.wo) * g.stride - g.padding + i, iw = (l % g.wo) * g.stride - g.padding + j;
    col[e] = (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) ? x[((b * g.cin + c) * g.h + ih) * g.w + iw] : 0.0f;
  }
}

// dx [n, C, H, W]: one thread per element sums the col entries Im2Col
// copied from it, in increasing (i, j) order from an exact 0, as the CPU.
__global__ void Col2ImKernel(const float* col, Conv2dGeometry g, int64_t total, float* dx) {
  const int64_t L = g.ho * g.wo, K = g.cin * g.kh * g.kw;
  PSYNC_GRID_STRIDE(e, total) {
    const int64_t w = e % g.w, h = (e / g.w) % g.h, c = (e / (g.w * g.h)) % g.cin, b = e / (g.w * g.h * g.cin);
    const float* cb = col + b * K * L;
    float acc = 0.0f;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t t = h + g.padding - i;  // = oh * stride
      if (t < 0 || t % g.stride != 0 || t / g.stride >= g.ho) continue;
      const int64_t oh = t / g.stride;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t u = w + g.padding - j;  // = ow * stride
        if (u < 0 || u % g.stride != 0 || u / g.stride >= g.wo) continue;
        acc = __fadd_rn(acc, cb[((c * g.kh + i) * g.kw + j) * L + oh * g.wo + u / g.stride]);
      }
    }
    dx[e] = acc;
  }
}

// y [n, C, L] += bias[c].
__global__ void AddChannelBiasKernel(float* y, const float* bias, int64_t c, int64_t l, int64_t total) {
  PSYNC_GRID_STRIDE(e, total) y[e] = __fadd_rn(y[e], bias[(e / l) % c]);
}

// dbias[c] for grad [n, C, L]: block c, each thread a strided double sum,
// then a fixed shared-memory tree (reproducible; equal to the CPU's order of
// sums to double round-off).
__global__ void ChannelSumsKernel(const float* grad, int64_t n, int64_t c, int64_t l, float* dbias) {
  __shared__ double partial[kThreads];
  const int64_t ch = blockIdx.x;
  double acc = 0.0;
  for (int64_t t = threadIdx.x; t < n * l; t += kThreads) acc += grad[((t / l) * c + ch) * l + t % l];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) dbias[ch] = static_cast<float>(partial[0]);
}

// acc[j] += parts[b, j] for b in order (the CPU's exact sequence of adds).
__global__ void AccumulatePartsKernel(const float* parts, int64_t n, int64_t m, double* acc) {
  PSYNC_GRID_STRIDE(j, m) {
    double a = acc[j];
    for (int64_t b = 0; b < n; ++b) a = __dadd_rn(a, static_cast<double>(parts[b * m + j]));
    acc[j] = a;
  }
}

// One thread per output: the CPU's (torch's) window loop.
__global__ void MaxPoolKernel(const float* x, int64_t h, int64_t w, int64_t k, int64_t total, float* y,
                              int64_t* indices) {
  const int64_t ho = h / k, wo = w / k;
  PSYNC_GRID_STRIDE(o, total) {
    const int64_t ow = o % wo, oh = (o / wo) % ho, p = o / (wo * ho);
    const float* xp = x + p * h * w;
    float best = -INFINITY;
    int64_t at = oh * k * w + ow * k;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t r = (oh * k + i) * w + ow * k;
      for (int64_t j = 0; j < k; ++j) {
        const float v = xp[r + j];
        if (v > best || isnan(v)) {
          best = v;
          at = r + j;
        }
      }
    }
    y[o] = best;
    indices[o] = at;
  }
}

// One thread per input element: its window's gradient if the window's index
// names it, else 0 (an index outside its window names no element: dropped).
__global__ void MaxPoolBackwardKernel(const float* grad, const int64_t* indices, int64_t h, int64_t w, int64_t k,
                                      int64_t total, float* dx) {
  const int64_t ho = h / k, wo = w / k;
  PSYNC_GRID_STRIDE(e, total) {
    const int64_t iw = e % w, ih = (e / w) % h, p = e / (w * h);
    const int64_t oh = ih / k, ow = iw / k;
    float v = 0.0f;
    if (oh < ho && ow < wo) {
      const int64_t o = (p * ho + oh) * wo + ow;
      if (indices[o] == ih * w + iw) v = grad[o];
    }
    dx[e] = v;
  }
}

const float* F(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }
float* FW(const Tensor& t) { return static_cast<float*>(t.raw_data()); }
const int64_t* I(const Tensor& t) { return static_cast<const int64_t*>(t.raw_data()); }

// loss[0] = the mean of per-row losses that launch_rows(per_row) writes into a
// [rows] double buffer living only on the compute stream (fixed-tree mean).
template <typename LaunchRows>
void MeanOfRowLosses(const Launch& l, int64_t rows, const Tensor& loss, LaunchRows launch_rows) {
  double* per_row = nullptr;
  PSYNC_CUDA_CHECK(
      cudaMallocAsync(reinterpret_cast<void**>(&per_row), static_cast<size_t>(rows) * sizeof(double), l.stream));
  launch_rows(per_row);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) {
    MeanKernel<<<1, kReduceThreads, 0, l.stream>>>(per_row, rows, static_cast<float*>(loss.raw_data()));
    err = cudaGetLastError();
  }
  cudaFreeAsync(per_row, l.stream);
  PSYNC_CUDA_CHECK(err);
}

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
    MeanOfRowLosses(l, rows, loss, [&](double* per_row) {
      PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(logits.dtype(), "CrossEntropy", [&] {
        const scalar_t* x = In<scalar_t>(logits);
        if (cols >= kWideRow) {
          CrossEntropyRowsWideKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(x, I(targets), per_row, rows, cols);
        } else {
          CrossEntropyRowsKernel<<<BlocksFor(rows), kThreads, 0, l.stream>>>(x, I(targets), per_row, rows, cols);
        }
      });
    });
  }

  void CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets,
                            const Tensor& dlogits) const override {
    Launch l(dlogits.device().index);
    const int64_t rows = logits.size(0), cols = logits.size(1);
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(logits.dtype(), "CrossEntropyBackward", [&] {
      if (cols >= kWideRow) {
        CrossEntropyBackwardWideKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(
            F(grad), In<scalar_t>(logits), I(targets), Out<scalar_t>(dlogits), rows, cols);
      } else {
        CrossEntropyBackwardKernel<<<BlocksFor(rows), kThreads, 0, l.stream>>>(
            F(grad), In<scalar_t>(logits), I(targets), Out<scalar_t>(dlogits), rows, cols);
      }
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void FusedClassifier(const Tensor& logits, const Tensor& targets, float grad_scale,
                       const Tensor& loss) const override {
    Launch l(loss.device().index);
    const int64_t rows = logits.size(0), cols = logits.size(1), ld = logits.stride(0);
    const double g = static_cast<double>(grad_scale) / static_cast<double>(rows);
    MeanOfRowLosses(l, rows, loss, [&](double* per_row) {
      PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(logits.dtype(), "FusedClassifier", [&] {
        FusedClassifierKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(Out<scalar_t>(logits), ld, I(targets),
                                                                          per_row, rows, cols, g);
      });
    });
  }

  void RescaleClassifierGrad(const Tensor& dlogits, const Tensor& grad, float grad_scale) const override {
    Launch l(dlogits.device().index);
    const int64_t rows = dlogits.size(0), cols = dlogits.size(1), ld = dlogits.stride(0);
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(dlogits.dtype(), "RescaleClassifierGrad", [&] {
      RescaleClassifierKernel<<<BlocksFor(rows * cols), kThreads, 0, l.stream>>>(Out<scalar_t>(dlogits), ld, rows,
                                                                                 cols, F(grad), grad_scale);
    });
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
    PSYNC_CUDA_DISPATCH_PAIR_FLOAT_AND_BF16(x.dtype(), y.dtype(), "LayerNorm", [&] {
      LayerNormKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(In<a_t>(x), F(weight), F(bias), eps, rows, Cols(x),
                                                                   Out<b_t>(y), FW(mean), FW(rstd));
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void ResidualLayerNorm(const Tensor& x, const Tensor& a, const Tensor& weight, const Tensor& bias, double eps,
                         const Tensor& h, const Tensor& y, const Tensor& mean, const Tensor& rstd) const override {
    Launch l(y.device().index);
    const int64_t rows = x.size(0);
    PSYNC_CUDA_DISPATCH_PAIR_FLOAT_AND_BF16(a.dtype(), y.dtype(), "ResidualLayerNorm", [&] {
      ResidualLayerNormKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(F(x), In<a_t>(a), F(weight), F(bias), eps,
                                                                           rows, Cols(x), FW(h), Out<b_t>(y), FW(mean),
                                                                           FW(rstd));
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void LayerNormBackward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& residual_grad, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias) const override {
    Launch l(dx.device().index);
    const int64_t rows = x.size(0);
    const int c = Cols(x);
    const int64_t chunks = (rows + kLayerNormRowChunk - 1) / kLayerNormRowChunk;
    // Chunk sums in a pool buffer that lives only on the compute stream.
    double* parts = nullptr;
    PSYNC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&parts),
                                     2 * static_cast<size_t>(chunks) * static_cast<size_t>(c) * sizeof(double),
                                     l.stream));
    double* part_w = parts;
    double* part_b = parts + chunks * c;
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((c + kThreads - 1) / kThreads));
    PSYNC_CUDA_DISPATCH_PAIR_FLOAT_AND_BF16(grad.dtype(), x.dtype(), "LayerNormBackward", [&] {
      LayerNormDxKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(
          In<a_t>(grad), In<b_t>(x), F(weight), F(mean), F(rstd),
          residual_grad.defined() ? In<b_t>(residual_grad) : nullptr, rows, c, Out<b_t>(dx));
      LayerNormChunkSumsKernel<<<grid, kThreads, 0, l.stream>>>(In<a_t>(grad), In<b_t>(x), F(mean), F(rstd), rows, c,
                                                                 part_w, part_b);
    });
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
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(y.dtype(), "Gelu", [&] {
      GeluKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(In<scalar_t>(x), Out<scalar_t>(y), n);
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void GeluBackward(const Tensor& grad, const Tensor& x, const Tensor& dx) const override {
    Launch l(dx.device().index);
    const int64_t n = dx.numel();
    PSYNC_CUDA_DISPATCH_PAIR_FLOAT_AND_BF16(grad.dtype(), x.dtype(), "GeluBackward", [&] {
      GeluBackwardKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(In<a_t>(grad), In<b_t>(x), Out<b_t>(dx), n);
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void CausalSoftmax(const Tensor& x, double scale, const Tensor& y) const override {
    Launch l(y.device().index);
    const int64_t rows = x.size(0);
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(y.dtype(), "CausalSoftmax", [&] {
      CausalSoftmaxKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(In<scalar_t>(x), static_cast<float>(scale), rows,
                                                                       Cols(x), Out<scalar_t>(y));
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void CausalSoftmaxBackward(const Tensor& grad, const Tensor& y, double scale, const Tensor& dx) const override {
    Launch l(dx.device().index);
    const int64_t rows = y.size(0);
    // The scale the forward used (float), as on the CPU.
    const double s = static_cast<double>(static_cast<float>(scale));
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(dx.dtype(), "CausalSoftmaxBackward", [&] {
      CausalSoftmaxBackwardKernel<<<RowBlocks(rows), kThreads, 0, l.stream>>>(In<scalar_t>(grad), In<scalar_t>(y), s,
                                                                               rows, Cols(y), Out<scalar_t>(dx));
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void Im2Col(const Tensor& x, const Conv2dGeometry& g, const Tensor& col) const override {
    Launch l(col.device().index);
    const int64_t total = col.numel();
    Im2ColKernel<<<BlocksFor(total), kThreads, 0, l.stream>>>(F(x), g, total, FW(col));
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void Col2Im(const Tensor& col, const Conv2dGeometry& g, const Tensor& dx) const override {
    Launch l(dx.device().index);
    const int64_t total = dx.numel();
    Col2ImKernel<<<BlocksFor(total), kThreads, 0, l.stream>>>(F(col), g, total, FW(dx));
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void AddChannelBias(const Tensor& y, const Tensor& bias) const override {
    Launch l(y.device().index);
    const int64_t total = y.numel();
    AddChannelBiasKernel<<<BlocksFor(total), kThreads, 0, l.stream>>>(FW(y), F(bias), y.size(1), y.size(2), total);
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void ChannelSums(const Tensor& grad, const Tensor& dbias) const override {
    Launch l(dbias.device().index);
    const int64_t c = grad.size(1);
    if (c > INT_MAX) throw TensorError("ChannelSums: more than 2^31 channels are not supported on CUDA");
    ChannelSumsKernel<<<static_cast<unsigned>(c), kThreads, 0, l.stream>>>(F(grad), grad.size(0), c, grad.size(2),
                                                                           FW(dbias));
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void AccumulateParts(const Tensor& parts, const Tensor& acc) const override {
    Launch l(acc.device().index);
    const int64_t n = parts.size(0), m = parts.numel() / n;
    AccumulatePartsKernel<<<BlocksFor(m), kThreads, 0, l.stream>>>(F(parts), n, m,
                                                                   static_cast<double*>(acc.raw_data()));
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void MaxPool2d(const Tensor& x, int64_t k, const Tensor& y, const Tensor& indices) const override {
    Launch l(y.device().index);
    const int64_t total = y.numel();
    MaxPoolKernel<<<BlocksFor(total), kThreads, 0, l.stream>>>(F(x), x.size(1), x.size(2), k, total, FW(y),
                                                                static_cast<int64_t*>(indices.raw_data()));
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void MaxPool2dBackward(const Tensor& grad, const Tensor& indices, int64_t k, const Tensor& dx) const override {
    Launch l(dx.device().index);
    const int64_t total = dx.numel();
    MaxPoolBackwardKernel<<<BlocksFor(total), kThreads, 0, l.stream>>>(F(grad), I(indices), dx.size(1), dx.size(2),
                                                                        k, total, FW(dx));
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
