// CUDA kernels of the attention family: the dispatch, and the SIMT kernels
// (float32 math on CUDA cores) that compute float32 storage, and bfloat16 at
// head sizes the tensor-core kernels (cuda/attention_mma.cu) are not built
// for. Unmeasured: written and compiled on a machine without a GPU; the
// tests in tests/unit/tensor/attention_cuda_test.cc check them against the
// CPU wherever a GPU exists.
//
// SIMT layout: a block of 8 warps owns 32 query rows (warp w rows w, w + 8,
// w + 16, w + 24) and streams 32-key tiles of k and v through shared memory
// (float32, rows padded to D + 1 so that lane j reading row j hits bank j).
// Per row and tile, lane j computes the score of key j (a dot product in d
// order), the warp takes the tile's max and sum with fixed xor trees, and
// lane l accumulates output dims l, l + 32, ... over the tile's keys in
// order (each p broadcast by a shuffle). The row sum is kept in double. The
// backward is two kernels, so nothing is ever added by two threads: dq per
// query row over the keys it sees, dk and dv per key row over the queries
// that see it. Every sum has a fixed order: the same bits every run.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cuda/attention_cuda.cuh"
#include "worker/tensor/cuda/launch.cuh"
#include "worker/tensor/ops/attention_kernels.h"

namespace psync::ops {
namespace {

using attention_cuda::Bf16;
using attention_cuda::Heads;

constexpr int kWarp = 32;
constexpr int kSimtWarps = 8;
constexpr int kSimtThreads = kSimtWarps * kWarp;
constexpr int kSimtRows = 32;  // query (or key) rows per block; also the keys (queries) per tile
constexpr int kRowsPerWarp = kSimtRows / kSimtWarps;
constexpr int kMaxPerLane = 8;  // D <= 256
constexpr int kMaxD = kMaxPerLane * kWarp;
constexpr unsigned kFull = 0xffffffffu;

using cuda::Load;  // storage (float or bfloat16) to float, and back (launch.cuh)
using cuda::Store;

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ double WarpSum(double v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// dot(a, b) over d in order (a, b in shared memory).
__device__ __forceinline__ float Dot(const float* a, const float* b, int d) {
  float s = 0.f;
  for (int i = 0; i < d; ++i) s = fmaf(a[i], b[i], s);
  return s;
}

// acc[u] (output dim lane + 32 u) += the sum over jj < n, in order, of lane
// jj's x times tile[jj][lane + 32 u]: the per-key weights of a tile, held one
// per lane, applied to the tile's rows.
__device__ __forceinline__ void AccumulateRows(float (&acc)[kMaxPerLane], float x, const float* tile, int ld, int n,
                                               int D, int lane) {
  for (int jj = 0; jj < n; ++jj) {
    const float xj = __shfl_sync(kFull, x, jj);
#pragma unroll
    for (int u = 0; u < kMaxPerLane; ++u) {
      const int d = lane + u * kWarp;
      if (d < D) acc[u] = fmaf(xj, tile[jj * ld + d], acc[u]);
    }
  }
}

// rows [32][D + 1] of a [B, H, T, D] operand from row t0 (zero past T), as float.
template <typename S>
__device__ void LoadTile(Heads<const S> x, int b, int h, int t0, int T, int D, float* tile) {
  const int ld = D + 1;
  for (int e = threadIdx.x; e < kSimtRows * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    tile[r * ld + d] = t0 + r < T ? Load(x.Row(b, h, t0 + r)[d]) : 0.f;
  }
}

// One row of a [B, H, T, D] operand into a warp's shared row.
template <typename S>
__device__ void LoadRow(Heads<const S> x, int b, int h, int t, int D, float* row) {
  for (int d = threadIdx.x % kWarp; d < D; d += kWarp) row[d] = Load(x.Row(b, h, t)[d]);
}

// For the block of query rows i0 .. i0 + 31: streams the key and value tiles
// up to the block's last row through shared memory (ks, vs) and calls
// row(r, i, j0) for each of this warp's rows r (query i = i0 + warp + 8 r)
// that sees keys of tile j0 (a warp-uniform test).
template <typename S, typename RowFn>
__device__ __forceinline__ void StreamKeyTiles(Heads<const S> k, Heads<const S> v, int b, int h, int i0, int T, int D,
                                               float* ks, float* vs, RowFn row) {
  const int warp = threadIdx.x / kWarp;
  const int i_end = min(i0 + kSimtRows, T);
  for (int j0 = 0; j0 < i_end; j0 += kSimtRows) {
    __syncthreads();
    LoadTile(k, b, h, j0, T, D, ks);
    LoadTile(v, b, h, j0, T, D, vs);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int i = i0 + warp + r * kSimtWarps;
      if (i < T && j0 <= i) row(r, i, j0);
    }
  }
}

// ---------------------------------------------------------------- forward

template <typename S>
__global__ void __launch_bounds__(kSimtThreads)
    SimtForwardKernel(Heads<const S> q, Heads<const S> k, Heads<const S> v, Heads<S> out, float* lse, int H, int T,
                      int D, float scale) {
  extern __shared__ float smem[];
  const int ld = D + 1;
  float* ks = smem;
  float* vs = ks + kSimtRows * ld;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* qw = vs + kSimtRows * ld + warp * D;
  const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * kSimtRows;
  float acc[kRowsPerWarp][kMaxPerLane], m[kRowsPerWarp];
  double l[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0;
#pragma unroll
    for (int u = 0; u < kMaxPerLane; ++u) acc[r][u] = 0.f;
  }
  StreamKeyTiles(k, v, b, h, i0, T, D, ks, vs, [&](int r, int i, int j0) {
    LoadRow(q, b, h, i, D, qw);
    __syncwarp();
    const int j = j0 + lane;
    const float z = j <= i ? Dot(qw, ks + lane * ld, D) * scale : -INFINITY;
    const float m_new = fmaxf(m[r], WarpMax(z));  // finite: key j0 <= i is seen
    const float alpha = expf(m[r] - m_new);
    const float p = j <= i ? expf(z - m_new) : 0.f;
    l[r] = l[r] * alpha + WarpSum(p);
    m[r] = m_new;
#pragma unroll
    for (int u = 0; u < kMaxPerLane; ++u) acc[r][u] *= alpha;
    AccumulateRows(acc[r], p, vs, ld, min(kSimtRows, i - j0 + 1), D, lane);
    __syncwarp();  // qw is rewritten for the next row
  });
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = i0 + warp + r * kSimtWarps;
    if (i >= T) continue;
    S* o = out.Row(b, h, i);
#pragma unroll
    for (int u = 0; u < kMaxPerLane; ++u) {
      const int d = lane + u * kWarp;
      if (d < D) o[d] = Store<S>(static_cast<float>(static_cast<double>(acc[r][u]) / l[r]));
    }
    if (lane == 0) lse[(static_cast<int64_t>(b) * H + h) * T + i] = static_cast<float>(m[r] + log(l[r]));
  }
}

// ---------------------------------------------------------------- backward

// delta[row] = sum_d grad[row, d] * out[row, d] (double, fixed tree): one
// warp per (b, h, t) row.
template <typename S>
__global__ void DeltaKernel(Heads<const S> grad, Heads<const S> out, float* delta, int H, int T, int D,
                            int64_t rows) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (r >= rows) return;
  const int t = static_cast<int>(r % T), h = static_cast<int>(r / T % H), b = static_cast<int>(r / T / H);
  const S* g = grad.Row(b, h, t);
  const S* o = out.Row(b, h, t);
  double s = 0.0;
  for (int d = lane; d < D; d += kWarp) s += static_cast<double>(Load(g[d])) * Load(o[d]);
  s = WarpSum(s);
  if (lane == 0) delta[r] = static_cast<float>(s);
}

// dq: per query row i, sum over keys j <= i of ds_ij k_j, ds = p (dp - delta) scale.
template <typename S>
__global__ void __launch_bounds__(kSimtThreads)
    SimtDqKernel(Heads<const S> grad, Heads<const S> q, Heads<const S> k, Heads<const S> v, const float* lse,
                 const float* delta, Heads<S> dq, int H, int T, int D, float scale) {
  extern __shared__ float smem[];
  const int ld = D + 1;
  float* ks = smem;
  float* vs = ks + kSimtRows * ld;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* qw = vs + kSimtRows * ld + warp * 2 * D;
  float* gw = qw + D;
  const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * kSimtRows;
  const int64_t base = (static_cast<int64_t>(b) * H + h) * T;
  float acc[kRowsPerWarp][kMaxPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int u = 0; u < kMaxPerLane; ++u) acc[r][u] = 0.f;
  }
  StreamKeyTiles(k, v, b, h, i0, T, D, ks, vs, [&](int r, int i, int j0) {
    LoadRow(q, b, h, i, D, qw);
    LoadRow(grad, b, h, i, D, gw);
    __syncwarp();
    const int j = j0 + lane;
    float ds = 0.f;
    if (j <= i) {
      const float p = expf(Dot(qw, ks + lane * ld, D) * scale - lse[base + i]);
      ds = p * (Dot(gw, vs + lane * ld, D) - delta[base + i]) * scale;
    }
    AccumulateRows(acc[r], ds, ks, ld, min(kSimtRows, i - j0 + 1), D, lane);
    __syncwarp();
  });
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = i0 + warp + r * kSimtWarps;
    if (i >= T) continue;
#pragma unroll
    for (int u = 0; u < kMaxPerLane; ++u) {
      const int d = lane + u * kWarp;
      if (d < D) dq.Row(b, h, i)[d] = Store<S>(acc[r][u]);
    }
  }
}

// dk, dv: per key row j, sums over queries i >= j of ds_ij q_i and p_ij grad_i.
template <typename S>
__global__ void __launch_bounds__(kSimtThreads)
    SimtDkDvKernel(Heads<const S> grad, Heads<const S> q, Heads<const S> k, Heads<const S> v, const float* lse,
                   const float* delta, Heads<S> dk, Heads<S> dv, int H, int T, int D, float scale) {
  extern __shared__ float smem[];
  const int ld = D + 1;
  float* qs = smem;
  float* gs = qs + kSimtRows * ld;
  float* rows = gs + kSimtRows * ld;  // lse, delta of the query tile
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* kw = rows + 2 * kSimtRows + warp * 2 * D;
  float* vw = kw + D;
  const int b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * kSimtRows;
  const int64_t base = (static_cast<int64_t>(b) * H + h) * T;
  float ak[kRowsPerWarp][kMaxPerLane], av[kRowsPerWarp][kMaxPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int u = 0; u < kMaxPerLane; ++u) ak[r][u] = av[r][u] = 0.f;
  }
  for (int i0 = j0; i0 < T; i0 += kSimtRows) {
    __syncthreads();
    LoadTile(q, b, h, i0, T, D, qs);
    LoadTile(grad, b, h, i0, T, D, gs);
    if (threadIdx.x < kSimtRows) {
      const int i = i0 + threadIdx.x;
      rows[threadIdx.x] = i < T ? lse[base + i] : 0.f;
      rows[kSimtRows + threadIdx.x] = i < T ? delta[base + i] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int j = j0 + warp + r * kSimtWarps;
      if (j >= T) continue;
      LoadRow(k, b, h, j, D, kw);
      LoadRow(v, b, h, j, D, vw);
      __syncwarp();
      const int i = i0 + lane;
      float p = 0.f, ds = 0.f;
      if (i >= j && i < T) {
        p = expf(Dot(qs + lane * ld, kw, D) * scale - rows[lane]);
        ds = p * (Dot(gs + lane * ld, vw, D) - rows[kSimtRows + lane]) * scale;
      }
      const int n = min(kSimtRows, T - i0);
      AccumulateRows(av[r], p, gs, ld, n, D, lane);
      AccumulateRows(ak[r], ds, qs, ld, n, D, lane);
      __syncwarp();
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int j = j0 + warp + r * kSimtWarps;
    if (j >= T) continue;
#pragma unroll
    for (int u = 0; u < kMaxPerLane; ++u) {
      const int d = lane + u * kWarp;
      if (d < D) {
        dk.Row(b, h, j)[d] = Store<S>(ak[r][u]);
        dv.Row(b, h, j)[d] = Store<S>(av[r][u]);
      }
    }
  }
}

// ---------------------------------------------------------------- dispatch

template <typename S>
Heads<S> HeadsOf(const Tensor& t) {
  return {static_cast<S*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2)};
}

// Dynamic shared memory above the default 48 KiB needs an opt-in per kernel.
template <typename Kernel>
void AllowSharedMemory(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    PSYNC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
}

void CheckSizes(const char* op, const Tensor& q) {
  if (q.size(3) > kMaxD) {
    throw TensorError(absl::StrCat(op, ": head size D=", q.size(3), " is above the CUDA kernels' limit of ", kMaxD,
                                   " (q ", ShapeToString(q.shape()), ")"));
  }
  if (q.size(0) > 65535 || q.size(1) > 65535 || q.size(2) > (int64_t{1} << 30)) {
    throw TensorError(absl::StrCat(op, ": q ", ShapeToString(q.shape()), " exceeds the CUDA grid (B, H <= 65535)"));
  }
}

template <typename S>
void SimtForward(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& out, float* lse,
                 cudaStream_t stream) {
  const int B = static_cast<int>(q.size(0)), H = static_cast<int>(q.size(1)), T = static_cast<int>(q.size(2)),
            D = static_cast<int>(q.size(3));
  const size_t bytes = (2 * kSimtRows * (D + 1) + kSimtWarps * D) * sizeof(float);
  AllowSharedMemory(SimtForwardKernel<S>, bytes);
  const dim3 grid((T + kSimtRows - 1) / kSimtRows, H, B);
  SimtForwardKernel<S><<<grid, kSimtThreads, bytes, stream>>>(HeadsOf<const S>(q), HeadsOf<const S>(k),
                                                               HeadsOf<const S>(v), HeadsOf<S>(out), lse, H, T, D, scale);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

template <typename S>
void SimtBackward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v, const float* lse,
                  const float* delta, float scale, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                  cudaStream_t stream) {
  const int H = static_cast<int>(q.size(1)), T = static_cast<int>(q.size(2)), D = static_cast<int>(q.size(3));
  const dim3 grid((T + kSimtRows - 1) / kSimtRows, H, static_cast<int>(q.size(0)));
  const size_t dq_bytes = (2 * kSimtRows * (D + 1) + kSimtWarps * 2 * D) * sizeof(float);
  AllowSharedMemory(SimtDqKernel<S>, dq_bytes);
  SimtDqKernel<S><<<grid, kSimtThreads, dq_bytes, stream>>>(HeadsOf<const S>(grad), HeadsOf<const S>(q),
                                                             HeadsOf<const S>(k), HeadsOf<const S>(v), lse, delta,
                                                             HeadsOf<S>(dq), H, T, D, scale);
  PSYNC_CUDA_CHECK(cudaGetLastError());
  const size_t kv_bytes = (2 * kSimtRows * (D + 1) + 2 * kSimtRows + kSimtWarps * 2 * D) * sizeof(float);
  AllowSharedMemory(SimtDkDvKernel<S>, kv_bytes);
  SimtDkDvKernel<S><<<grid, kSimtThreads, kv_bytes, stream>>>(HeadsOf<const S>(grad), HeadsOf<const S>(q),
                                                               HeadsOf<const S>(k), HeadsOf<const S>(v), lse, delta,
                                                               HeadsOf<S>(dk), HeadsOf<S>(dv), H, T, D, scale);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

class CudaAttention final : public AttentionKernels {
 public:
  void Forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
               const Tensor& lse) const override {
    CheckSizes("CausalAttention", q);
    cuda::Launch l(out.device().index);
    const float s = static_cast<float>(scale);
    float* lse_p = static_cast<float*>(lse.raw_data());
    const int D = static_cast<int>(q.size(3));
    if (q.dtype() == kBFloat16 && attention_cuda::MmaSupports(D)) {
      attention_cuda::MmaForward(HeadsOf<const Bf16>(q), HeadsOf<const Bf16>(k), HeadsOf<const Bf16>(v),
                                 HeadsOf<Bf16>(out), lse_p, static_cast<int>(q.size(0)), static_cast<int>(q.size(1)),
                                 static_cast<int>(q.size(2)), D, s, l.stream);
    } else if (q.dtype() == kBFloat16) {
      SimtForward<Bf16>(q, k, v, s, out, lse_p, l.stream);
    } else if (q.dtype() == kFloat32) {
      SimtForward<float>(q, k, v, s, out, lse_p, l.stream);
    } else {
      ThrowUnsupportedDType("CausalAttention", q.dtype());
    }
  }

  // Every CUDA backward is deterministic today (no atomics), so the flag
  // changes nothing yet.
  void Backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                const Tensor& lse, double scale, bool /*deterministic*/, const Tensor& dq, const Tensor& dk,
                const Tensor& dv) const override {
    CheckSizes("CausalAttentionBackward", q);
    if (q.dtype() != kBFloat16 && q.dtype() != kFloat32) ThrowUnsupportedDType("CausalAttentionBackward", q.dtype());
    cuda::Launch l(dq.device().index);
    const int B = static_cast<int>(q.size(0)), H = static_cast<int>(q.size(1)), T = static_cast<int>(q.size(2)),
              D = static_cast<int>(q.size(3));
    const int64_t rows = static_cast<int64_t>(B) * H * T;
    // delta lives only on the compute stream, for this call.
    float* delta = nullptr;
    PSYNC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&delta), static_cast<size_t>(rows) * sizeof(float), l.stream));
    const int per_block = cuda::kThreads / kWarp;
    const int blocks = static_cast<int>((rows + per_block - 1) / per_block);
    const float s = static_cast<float>(scale);
    const float* lse_p = static_cast<const float*>(lse.raw_data());
    try {
      if (q.dtype() == kBFloat16) {
        DeltaKernel<Bf16><<<blocks, cuda::kThreads, 0, l.stream>>>(HeadsOf<const Bf16>(grad), HeadsOf<const Bf16>(out),
                                                                   delta, H, T, D, rows);
        PSYNC_CUDA_CHECK(cudaGetLastError());
        if (attention_cuda::MmaSupports(D)) {
          attention_cuda::MmaBackward(HeadsOf<const Bf16>(grad), HeadsOf<const Bf16>(q), HeadsOf<const Bf16>(k),
                                      HeadsOf<const Bf16>(v), lse_p, delta, HeadsOf<Bf16>(dq), HeadsOf<Bf16>(dk),
                                      HeadsOf<Bf16>(dv), B, H, T, D, s, l.stream);
        } else {
          SimtBackward<Bf16>(grad, q, k, v, lse_p, delta, s, dq, dk, dv, l.stream);
        }
      } else {
        DeltaKernel<float><<<blocks, cuda::kThreads, 0, l.stream>>>(HeadsOf<const float>(grad),
                                                                    HeadsOf<const float>(out), delta, H, T, D, rows);
        PSYNC_CUDA_CHECK(cudaGetLastError());
        SimtBackward<float>(grad, q, k, v, lse_p, delta, s, dq, dk, dv, l.stream);
      }
    } catch (...) {
      cudaFreeAsync(delta, l.stream);
      throw;
    }
    PSYNC_CUDA_CHECK(cudaFreeAsync(delta, l.stream));
  }
};

}  // namespace

const AttentionKernels& CudaAttentionKernels() {
  static const CudaAttention kernels;
  return kernels;
}

}  // namespace psync::ops
