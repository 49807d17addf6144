// bf16 tensor-core kernels of the causal attention (FlashAttention-2's
// algorithm on mma.sync.m16n8k16 bf16 -> f32), for head sizes 16, 32, 64.
// Unmeasured: written and compiled without a GPU (sm_90 build); the CUDA
// tests compare them with the CPU kernels wherever a GPU exists.
//
// Why hand-written mma rather than cuDNN's fused attention: this machine has
// no GPU to validate a cuDNN graph on (engine choice, layouts and workspace
// are runtime decisions of cuDNN), while the fragment layouts of mma.sync are
// fixed by the PTX ISA and every index below can be checked by reading. The
// same tiles as the CPU (64 queries x 64 keys) and the same causal skip.
//
// Fragments (PTX ISA, m16n8k16, lane = 4 g + t): A (16 x 16, row-major) regs
// {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}; B (16 x 8,
// k x n) regs {(k 2t..2t+1, n g), (k 2t+8.., n g)}; C (16 x 8, f32)
// {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}. Two adjacent C tiles of
// scores are one A fragment of probabilities (FlashAttention-2's trick), so
// P never leaves registers. B operands come from shared memory: a matrix
// whose k dim is contiguous there is read as 32-bit pairs, so each operand is
// kept in the layout (row-major or transposed) its product needs. Rows are
// padded by 8 bf16 (16 bytes): lanes (g, t) then hit 32 different banks.
//
// Forward: a block of 4 warps owns 64 query rows (16 per warp), loops over
// the key tiles up to the diagonal; online softmax in registers (exp2 of
// scaled scores, row max and sum over the 4 lanes of a row by xor shuffles).
// Backward, deterministic: DkDv (a block per key tile; each warp owns 16
// keys, loops over the query tiles from the diagonal on: S^T = K Q^T,
// P^T from lse, dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta) scale,
// dK += dS^T Q) and Dq (a block per query tile: S = Q K^T, dP = dO V^T, dS,
// dQ += dS K over the key tiles it sees). No atomics: fixed order, same bits.
#include <cstdint>

#include "worker/tensor/cuda/attention_cuda.cuh"
#include "worker/tensor/cuda/launch.cuh"

namespace psync::ops::attention_cuda {
namespace {

constexpr int kTile = 64;  // queries and keys per tile (ops/attention_kernels.h kAttentionTile)
constexpr int kWarps = 4;  // 16 rows each
constexpr int kThreadsMma = kWarps * 32;
constexpr int kPad = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}

// Two adjacent bf16 in shared memory (even index: 4-byte aligned).
__device__ __forceinline__ uint32_t Pair(const Bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Two adjacent elements d, d + 1 of row t of a global operand, 0 past T
// (element loads: any row stride and offset).
__device__ __forceinline__ uint32_t GlobalPair(Heads<const Bf16> x, int b, int h, int t, int d, int T) {
  if (t >= T) return 0u;
  const Bf16* r = x.Row(b, h, t);
  __nv_bfloat162 v;
  v.x = r[d];
  v.y = r[d + 1];
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A fragments of rows r, r + 8 (this lane's g rows) of a [.., D] operand, all D / 16 k-steps.
template <int D>
__device__ __forceinline__ void LoadRowsA(Heads<const Bf16> x, int b, int h, int r, int T, int t,
                                          uint32_t (&a)[D / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int d = kk * 16 + 2 * t;
    a[kk][0] = GlobalPair(x, b, h, r, d, T);
    a[kk][1] = GlobalPair(x, b, h, r + 8, d, T);
    a[kk][2] = GlobalPair(x, b, h, r, d + 8, T);
    a[kk][3] = GlobalPair(x, b, h, r + 8, d + 8, T);
  }
}

// Rows t0 .. t0 + 63 of a global operand into shared memory, row-major
// ([64][D + kPad]) and/or transposed ([D][64 + kPad]); zero past T.
template <int D>
__device__ void StageTile(Heads<const Bf16> x, int b, int h, int t0, int T, Bf16* rows, Bf16* cols) {
  const Bf16 zero = __float2bfloat16_rn(0.f);
  for (int e = threadIdx.x; e < kTile * D; e += kThreadsMma) {
    const int r = e / D, d = e % D;
    const Bf16 val = t0 + r < T ? x.Row(b, h, t0 + r)[d] : zero;
    if (rows) rows[r * (D + kPad) + d] = val;
    if (cols) cols[d * (kTile + kPad) + r] = val;
  }
}

// c[n][..] = a (16 x D, registers) times rows^T, rows [64][D + kPad] in
// shared memory: the 16 x 64 products of this warp's rows with 64 rows.
template <int D>
__device__ __forceinline__ void RowsTimesTileT(const uint32_t (&a)[D / 16][4], const Bf16* rows, int g, int t,
                                               float (&c)[kTile / 8][4]) {
#pragma unroll
  for (int n = 0; n < kTile / 8; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
      const Bf16* p = rows + (n * 8 + g) * (D + kPad) + kk * 16 + 2 * t;
      Mma(c[n], a[kk], Pair(p), Pair(p + 8));
    }
  }
}

// acc (16 x D) += p (16 x 64, C fragments as bf16 A fragments) times the
// tile whose transpose cols [D][64 + kPad] is in shared memory.
template <int D>
__device__ __forceinline__ void ProbsTimesTile(const float (&p)[kTile / 8][4], const Bf16* cols, int g, int t,
                                               float (&acc)[D / 8][4]) {
#pragma unroll
  for (int kt = 0; kt < kTile / 16; ++kt) {
    const uint32_t a[4] = {Pack(p[2 * kt][0], p[2 * kt][1]), Pack(p[2 * kt][2], p[2 * kt][3]),
                           Pack(p[2 * kt + 1][0], p[2 * kt + 1][1]), Pack(p[2 * kt + 1][2], p[2 * kt + 1][3])};
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const Bf16* c = cols + (n * 8 + g) * (kTile + kPad) + kt * 16 + 2 * t;
      Mma(acc[n], a, Pair(c), Pair(c + 8));
    }
  }
}

// Stores this lane's elements of a 16 x D C-fragment block (rows r, r + 8),
// times `mul0` / `mul1` per row, to rows < T of a global operand.
template <int D>
__device__ __forceinline__ void StoreRows(const float (&c)[D / 8][4], Heads<Bf16> x, int b, int h, int r, int T,
                                          int t, float mul0, float mul1) {
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int d = n * 8 + 2 * t;
    if (r < T) {
      Bf16* row = x.Row(b, h, r);
      row[d] = __float2bfloat16_rn(c[n][0] * mul0);
      row[d + 1] = __float2bfloat16_rn(c[n][1] * mul0);
    }
    if (r + 8 < T) {
      Bf16* row = x.Row(b, h, r + 8);
      row[d] = __float2bfloat16_rn(c[n][2] * mul1);
      row[d + 1] = __float2bfloat16_rn(c[n][3] * mul1);
    }
  }
}

__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---------------------------------------------------------------- forward

template <int D>
__global__ void __launch_bounds__(kThreadsMma)
    MmaForwardKernel(Heads<const Bf16> q, Heads<const Bf16> k, Heads<const Bf16> v, Heads<Bf16> out, float* lse,
                     int H, int T, float scale_log2) {
  __shared__ __align__(16) Bf16 ks[kTile * (D + kPad)];
  __shared__ __align__(16) Bf16 vt[D * (kTile + kPad)];
  const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = i0 + warp * 16 + g, r1 = r0 + 8;  // this lane's two query rows
  uint32_t qa[D / 16][4];
  LoadRowsA<D>(q, b, h, r0, T, t, qa);
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // log2 units; l: this lane's part
  for (int j0 = 0; j0 <= i0; j0 += kTile) {  // key tiles up to the diagonal
    __syncthreads();
    StageTile<D>(k, b, h, j0, T, ks, nullptr);
    StageTile<D>(v, b, h, j0, T, nullptr, vt);
    __syncthreads();
    float s[kTile / 8][4];
    RowsTimesTileT<D>(qa, ks, g, t, s);
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int kj = j0 + n * 8 + 2 * t + e;
        s[n][e] = kj <= r0 && kj < T ? s[n][e] * scale_log2 : -INFINITY;
        s[n][2 + e] = kj <= r1 && kj < T ? s[n][2 + e] * scale_log2 : -INFINITY;
        mx0 = fmaxf(mx0, s[n][e]);
        mx1 = fmaxf(mx1, s[n][2 + e]);
      }
    }
    // Every row sees key j0 (rows past T included): the new max is finite.
    const float n0 = fmaxf(m0, QuadMax(mx0)), n1 = fmaxf(m1, QuadMax(mx1));
    const float a0 = exp2f(m0 - n0), a1 = exp2f(m1 - n1);  // 0 on the first tile
    m0 = n0;
    m1 = n1;
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[n][e] = exp2f(s[n][e] - n0);
        s[n][2 + e] = exp2f(s[n][2 + e] - n1);
        sum0 += s[n][e];
        sum1 += s[n][2 + e];
      }
    }
    l0 = l0 * a0 + sum0;
    l1 = l1 * a1 + sum1;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= a0;
      o[n][1] *= a0;
      o[n][2] *= a1;
      o[n][3] *= a1;
    }
    ProbsTimesTile<D>(s, vt, g, t, o);
  }
  l0 = QuadSum(l0);
  l1 = QuadSum(l1);
  StoreRows<D>(o, out, b, h, r0, T, t, 1.f / l0, 1.f / l1);
  if (t == 0) {
    const int64_t base = (static_cast<int64_t>(b) * H + h) * T;
    if (r0 < T) lse[base + r0] = (m0 + log2f(l0)) * kLn2;
    if (r1 < T) lse[base + r1] = (m1 + log2f(l1)) * kLn2;
  }
}

// ---------------------------------------------------------------- backward

// dK, dV of one key tile (64 keys, 16 per warp).
template <int D>
__global__ void __launch_bounds__(kThreadsMma)
    MmaDkDvKernel(Heads<const Bf16> grad, Heads<const Bf16> q, Heads<const Bf16> k, Heads<const Bf16> v,
                  const float* lse, const float* delta, Heads<Bf16> dk, Heads<Bf16> dv, int H, int T, float scale,
                  float scale_log2) {
  __shared__ __align__(16) Bf16 qs[kTile * (D + kPad)];
  __shared__ __align__(16) Bf16 qt[D * (kTile + kPad)];
  __shared__ __align__(16) Bf16 gs[kTile * (D + kPad)];
  __shared__ __align__(16) Bf16 gt[D * (kTile + kPad)];
  __shared__ float lse_s[kTile], delta_s[kTile];
  const int b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int c0 = j0 + warp * 16 + g, c1 = c0 + 8;  // this lane's two key rows
  const int64_t base = (static_cast<int64_t>(b) * H + h) * T;
  uint32_t ka[D / 16][4], va[D / 16][4];
  LoadRowsA<D>(k, b, h, c0, T, t, ka);
  LoadRowsA<D>(v, b, h, c0, T, t, va);
  float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dka[n][e] = dva[n][e] = 0.f;
  }
  for (int i0 = j0; i0 < T; i0 += kTile) {  // query tiles from the diagonal on
    __syncthreads();
    StageTile<D>(q, b, h, i0, T, qs, qt);
    StageTile<D>(grad, b, h, i0, T, gs, gt);
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      lse_s[threadIdx.x] = i < T ? lse[base + i] * kLog2e : 0.f;
      delta_s[threadIdx.x] = i < T ? delta[base + i] : 0.f;
    }
    __syncthreads();
    float p[kTile / 8][4];  // P^T: rows = keys c0, c1; columns = queries
    RowsTimesTileT<D>(ka, qs, g, t, p);
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = n * 8 + 2 * t + e, qi = i0 + col;
        p[n][e] = qi >= c0 && qi < T ? exp2f(p[n][e] * scale_log2 - lse_s[col]) : 0.f;
        p[n][2 + e] = qi >= c1 && qi < T ? exp2f(p[n][2 + e] * scale_log2 - lse_s[col]) : 0.f;
      }
    }
    ProbsTimesTile<D>(p, gt, g, t, dva);  // dV += P^T dO
    float ds[kTile / 8][4];               // dP^T = V dO^T, then dS^T
    RowsTimesTileT<D>(va, gs, g, t, ds);
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float dl = delta_s[n * 8 + 2 * t + e];
        ds[n][e] = p[n][e] * (ds[n][e] - dl) * scale;
        ds[n][2 + e] = p[n][2 + e] * (ds[n][2 + e] - dl) * scale;
      }
    }
    ProbsTimesTile<D>(ds, qt, g, t, dka);  // dK += dS^T Q
  }
  StoreRows<D>(dka, dk, b, h, c0, T, t, 1.f, 1.f);
  StoreRows<D>(dva, dv, b, h, c0, T, t, 1.f, 1.f);
}

// dQ of one query tile (64 queries, 16 per warp).
template <int D>
__global__ void __launch_bounds__(kThreadsMma)
    MmaDqKernel(Heads<const Bf16> grad, Heads<const Bf16> q, Heads<const Bf16> k, Heads<const Bf16> v,
                const float* lse, const float* delta, Heads<Bf16> dq, int H, int T, float scale, float scale_log2) {
  __shared__ __align__(16) Bf16 ks[kTile * (D + kPad)];
  __shared__ __align__(16) Bf16 kt[D * (kTile + kPad)];
  __shared__ __align__(16) Bf16 vs[kTile * (D + kPad)];
  const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = i0 + warp * 16 + g, r1 = r0 + 8;
  const int64_t base = (static_cast<int64_t>(b) * H + h) * T;
  uint32_t qa[D / 16][4], ga[D / 16][4];
  LoadRowsA<D>(q, b, h, r0, T, t, qa);
  LoadRowsA<D>(grad, b, h, r0, T, t, ga);
  const float lse0 = r0 < T ? lse[base + r0] * kLog2e : 0.f, lse1 = r1 < T ? lse[base + r1] * kLog2e : 0.f;
  const float dl0 = r0 < T ? delta[base + r0] : 0.f, dl1 = r1 < T ? delta[base + r1] : 0.f;
  float dqa[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) dqa[n][0] = dqa[n][1] = dqa[n][2] = dqa[n][3] = 0.f;
  for (int j0 = 0; j0 <= i0; j0 += kTile) {
    __syncthreads();
    StageTile<D>(k, b, h, j0, T, ks, kt);
    StageTile<D>(v, b, h, j0, T, vs, nullptr);
    __syncthreads();
    float p[kTile / 8][4], ds[kTile / 8][4];
    RowsTimesTileT<D>(qa, ks, g, t, p);   // S = Q K^T
    RowsTimesTileT<D>(ga, vs, g, t, ds);  // dP = dO V^T
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int kj = j0 + n * 8 + 2 * t + e;
        const float p0 = kj <= r0 && kj < T ? exp2f(p[n][e] * scale_log2 - lse0) : 0.f;
        const float p1 = kj <= r1 && kj < T ? exp2f(p[n][2 + e] * scale_log2 - lse1) : 0.f;
        ds[n][e] = p0 * (ds[n][e] - dl0) * scale;
        ds[n][2 + e] = p1 * (ds[n][2 + e] - dl1) * scale;
      }
    }
    ProbsTimesTile<D>(ds, kt, g, t, dqa);  // dQ += dS K
  }
  StoreRows<D>(dqa, dq, b, h, r0, T, t, 1.f, 1.f);
}

template <int D>
void Forward(Heads<const Bf16> q, Heads<const Bf16> k, Heads<const Bf16> v, Heads<Bf16> out, float* lse, int B, int H,
             int T, float scale, cudaStream_t stream) {
  const dim3 grid((T + kTile - 1) / kTile, H, B);
  MmaForwardKernel<D><<<grid, kThreadsMma, 0, stream>>>(q, k, v, out, lse, H, T, scale * kLog2e);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

template <int D>
void Backward(Heads<const Bf16> grad, Heads<const Bf16> q, Heads<const Bf16> k, Heads<const Bf16> v, const float* lse,
              const float* delta, Heads<Bf16> dq, Heads<Bf16> dk, Heads<Bf16> dv, int B, int H, int T, float scale,
              cudaStream_t stream) {
  const dim3 grid((T + kTile - 1) / kTile, H, B);
  MmaDkDvKernel<D><<<grid, kThreadsMma, 0, stream>>>(grad, q, k, v, lse, delta, dk, dv, H, T, scale, scale * kLog2e);
  PSYNC_CUDA_CHECK(cudaGetLastError());
  MmaDqKernel<D><<<grid, kThreadsMma, 0, stream>>>(grad, q, k, v, lse, delta, dq, H, T, scale, scale * kLog2e);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool MmaSupports(int d) { return d == 16 || d == 32 || d == 64; }

void MmaForward(Heads<const Bf16> q, Heads<const Bf16> k, Heads<const Bf16> v, Heads<Bf16> out, float* lse, int B,
                int H, int T, int D, float scale, cudaStream_t stream) {
  switch (D) {
    case 16: return Forward<16>(q, k, v, out, lse, B, H, T, scale, stream);
    case 32: return Forward<32>(q, k, v, out, lse, B, H, T, scale, stream);
    case 64: return Forward<64>(q, k, v, out, lse, B, H, T, scale, stream);
    default: break;
  }
}

void MmaBackward(Heads<const Bf16> grad, Heads<const Bf16> q, Heads<const Bf16> k, Heads<const Bf16> v,
                 const float* lse, const float* delta, Heads<Bf16> dq, Heads<Bf16> dk, Heads<Bf16> dv, int B, int H,
                 int T, int D, float scale, cudaStream_t stream) {
  switch (D) {
    case 16: return Backward<16>(grad, q, k, v, lse, delta, dq, dk, dv, B, H, T, scale, stream);
    case 32: return Backward<32>(grad, q, k, v, lse, delta, dq, dk, dv, B, H, T, scale, stream);
    case 64: return Backward<64>(grad, q, k, v, lse, delta, dq, dk, dv, B, H, T, scale, stream);
    default: break;
  }
}

}  // namespace psync::ops::attention_cuda
