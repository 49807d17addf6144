// CPU kernels of the attention family: flash-style causal attention, one
// (batch, head) at a time, single-threaded like the other nn kernels.
//
// The math type M is float for float32 and bfloat16 storage, double for
// float64. Float32 and float64 heads are read and written in place (the
// tile products are OpenBLAS sgemm/dgemm with the views' row strides, the
// output accumulated in the output tensor); bfloat16 heads are converted
// into float scratch and back. Scratch is O(T * D) per head at most;
// nothing of size T x T exists.
//
// Forward, per query tile (kAttentionTile rows) and each key tile up to the
// diagonal, in order: S = Q K^T (gemm), z = scale * S in M (as CausalSoftmax
// scales), the row max m and sum l updated online (p = exp(z - m_new), the
// old accumulator and l rescaled by exp(m_old - m_new); l in double, summed
// in SumInOrder's order), acc += P V (gemm; acc is the output's rows). Then
// out = acc / l and lse = m + log(l).
//
// Backward, per key tile, for the strip of all queries that see it (rows
// from the tile's first key on), in order: P = exp(scale Q K^T - lse)
// recomputed, dV = P^T dO, dP = dO V^T, dS = P (dP - delta) scale with
// delta_i = dO_i . out_i (double), dK = dS^T Q, dQ += dS K. Every sum runs
// in an order fixed by the shapes: the same bits every run.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "worker/tensor/cpu/cpu_util.h"
#include "psync/tensor/dtype.h"
#include "worker/tensor/cpu/vec_math.h"
#include "worker/tensor/ops/attention_kernels.h"

namespace psync::ops {
namespace {

using cpu::Exp;
using cpu::MaxOf;
using cpu::SumInOrder;

constexpr int64_t kTile = kAttentionTile;
constexpr int64_t kStrip = 32;

// Row-major c = op(a) op(b) + beta c.
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

// The rows of one (batch, head) of a [B, H, T, D] tensor with unit last
// stride: element (t, d) at p[t * ld + d].
template <typename S>
struct HeadRows {
  S* p;
  int64_t ld;
  S* row(int64_t t) const { return p + t * ld; }
};
template <typename S>
HeadRows<S> Head(const Tensor& t, int64_t b, int64_t h) {
  return {static_cast<S*>(t.raw_data()) + b * t.stride(0) + h * t.stride(1), t.stride(2)};
}

// A head of an input in the math type M: read in place when the storage is
// M, else converted into `scratch` ([t, d] contiguous).
template <typename S, typename M>
HeadRows<const M> Input(const Tensor& x, int64_t b, int64_t h, int64_t t, int64_t d, std::vector<M>& scratch) {
  if constexpr (std::is_same_v<S, M>) {
    return Head<const S>(x, b, h);
  } else {
    const HeadRows<const S> src = Head<const S>(x, b, h);
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < d; ++j) scratch[static_cast<size_t>(i * d + j)] = cpu::Convert<M>(src.row(i)[j]);
    }
    return {scratch.data(), d};
  }
}

// A head of an output: written in place when the storage is M, else into
// `scratch` and converted by Finish.
template <typename S, typename M>
HeadRows<M> Output(const Tensor& y, int64_t b, int64_t h, int64_t d, std::vector<M>& scratch) {
  if constexpr (std::is_same_v<S, M>) {
    return Head<S>(y, b, h);
  } else {
    return {scratch.data(), d};
  }
}
template <typename S, typename M>
void Finish(HeadRows<M> rows, const Tensor& y, int64_t b, int64_t h, int64_t t, int64_t d) {
  if constexpr (!std::is_same_v<S, M>) {
    const HeadRows<S> dst = Head<S>(y, b, h);
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < d; ++j) dst.row(i)[j] = cpu::Convert<S>(rows.row(i)[j]);
    }
  }
}

// Keys of tile j0.. that query i sees: j0 + [0, n).
inline int64_t VisibleKeys(int64_t i, int64_t j0, int64_t cols) { return std::clamp<int64_t>(i - j0 + 1, 0, cols); }

// One tile of the online softmax. s [rows, ld]: the scores of query rows
// i0.. against keys j0..j0+cols, replaced by p = exp(scale s - m_new) (0 for
// keys a row does not see); m, l: the rows' running max and sum, updated;
// alpha: per row, the factor exp(m_old - m_new) the accumulator needs (0 on
// the first tile, where m_old = -inf).
template <typename M>
PSYNC_CPU_CLONES void SoftmaxTile(M* s, int64_t ld, int64_t rows, int64_t cols, int64_t i0, int64_t j0, M scale, M* m,
                                  double* l, M* alpha) {
  for (int64_t r = 0; r < rows; ++r) {
    M* sr = s + r * ld;
    const int64_t n = VisibleKeys(i0 + r, j0, cols);
    if (n == 0) {
      alpha[r] = M(1);
      for (int64_t j = 0; j < cols; ++j) sr[j] = M(0);
      continue;
    }
    const M tile_max = MaxOf<M>(n, [&](int64_t j) { return sr[j] * scale; });
    const M m_new = tile_max > m[r] ? tile_max : m[r];
    alpha[r] = Exp(m[r] - m_new);
    for (int64_t j = 0; j < n; ++j) sr[j] = Exp(sr[j] * scale - m_new);
    for (int64_t j = n; j < cols; ++j) sr[j] = M(0);
    l[r] = l[r] * static_cast<double>(alpha[r]) + SumInOrder(n, [&](int64_t j) { return static_cast<double>(sr[j]); });
    m[r] = m_new;
  }
}

// acc rows (row stride ld) r *= alpha[r].
template <typename M>
PSYNC_CPU_CLONES void RescaleRows(M* acc, int64_t ld, int64_t rows, int64_t d, const M* alpha) {
  for (int64_t r = 0; r < rows; ++r) {
    const M a = alpha[r];
    if (a == M(1)) continue;
    M* ar = acc + r * ld;
    for (int64_t j = 0; j < d; ++j) ar[j] *= a;
  }
}

// Scratch of one call, reused across heads: the converted q, k, v (and
// grad, out) and outputs for bfloat16, and the tiles (the backward's are
// strips of t rows).
template <typename M>
struct Scratch {
  Scratch(int64_t t, int64_t d, int heads_in, int heads_out)
      : in(static_cast<size_t>(heads_in)), out(static_cast<size_t>(heads_out)),
        s(static_cast<size_t>(std::max(t, kTile) * kTile)), ds(s.size()), m(kTile), alpha(kTile), l(kTile),
        lse(static_cast<size_t>(t)), delta(lse.size()) {
    for (auto& v : in) v.resize(static_cast<size_t>(t * d));
    for (auto& v : out) v.resize(static_cast<size_t>(t * d));
  }
  std::vector<std::vector<M>> in, out;
  std::vector<M> s, ds, m, alpha;
  std::vector<double> l;
  std::vector<M> lse, delta;
};

// One head: q, k, v [t, d] -> o [t, d], lse [t]. The first key tile of a
// query tile writes o with beta 0 (its alpha is 0), later ones rescale and add.
template <typename M>
void ForwardHead(Scratch<M>& w, HeadRows<const M> q, HeadRows<const M> k, HeadRows<const M> v, HeadRows<M> o,
                 int64_t t, int64_t d, M scale, M* lse) {
  for (int64_t i0 = 0; i0 < t; i0 += kTile) {
    const int64_t rows = std::min(kTile, t - i0);
    std::fill(w.m.begin(), w.m.end(), -std::numeric_limits<M>::infinity());
    std::fill(w.l.begin(), w.l.end(), 0.0);
    for (int64_t j0 = 0; j0 < i0 + rows; j0 += kTile) {  // key tiles up to the diagonal
      const int64_t cols = std::min(kTile, t - j0);
      Gemm(false, true, rows, cols, d, q.row(i0), q.ld, k.row(j0), k.ld, M(0), w.s.data(), kTile);
      SoftmaxTile(w.s.data(), kTile, rows, cols, i0, j0, scale, w.m.data(), w.l.data(), w.alpha.data());
      if (j0 > 0) RescaleRows(o.row(i0), o.ld, rows, d, w.alpha.data());
      Gemm(false, false, rows, d, cols, w.s.data(), kTile, v.row(j0), v.ld, j0 > 0 ? M(1) : M(0), o.row(i0), o.ld);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const double l = w.l[static_cast<size_t>(r)], inv = 1.0 / l;
      M* orow = o.row(i0 + r);
      for (int64_t j = 0; j < d; ++j) orow[j] = static_cast<M>(static_cast<double>(orow[j]) * inv);
      lse[i0 + r] = static_cast<M>(static_cast<double>(w.m[static_cast<size_t>(r)]) + std::log(l));
    }
  }
}

// p [rows, ld] = exp(scale s - lse_i) for the keys row i sees, 0 after.
template <typename M>
PSYNC_CPU_CLONES void ProbsTile(M* s, int64_t ld, int64_t rows, int64_t cols, int64_t i0, int64_t j0, M scale,
                                const M* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    M* sr = s + r * ld;
    const int64_t n = VisibleKeys(i0 + r, j0, cols);
    const M li = lse[i0 + r];
    for (int64_t j = 0; j < n; ++j) sr[j] = Exp(sr[j] * scale - li);
    for (int64_t j = n; j < cols; ++j) sr[j] = M(0);
  }
}

// dp [rows, ld] := p (dp - delta_i) scale (p is 0 where the key is unseen).
template <typename M>
PSYNC_CPU_CLONES void ScoreGradTile(M* dp, const M* p, int64_t ld, int64_t rows, int64_t cols, int64_t i0, M scale,
                                    const M* delta) {
  for (int64_t r = 0; r < rows; ++r) {
    M* dr = dp + r * ld;
    const M* pr = p + r * ld;
    const M di = delta[i0 + r];
    for (int64_t j = 0; j < cols; ++j) dr[j] = pr[j] * (dr[j] - di) * scale;
  }
}

// One head: q, k, v, grad (dout), out [t, d] and w.lse -> dq, dk, dv [t, d].
// Per key tile j0, the strip of every query that sees it (rows j0..t-1) at
// once: five products over the strip instead of five per tile pair (larger
// products, fewer calls; the strip is [t, kTile]: O(T) memory). dk and dv of
// the key tile are written whole (beta 0); dq accumulates over the key tiles
// in order, its first contribution (key tile 0) written with beta 0.
template <typename M>
void BackwardHead(Scratch<M>& w, HeadRows<const M> q, HeadRows<const M> k, HeadRows<const M> v,
                  HeadRows<const M> dout, HeadRows<const M> out, HeadRows<M> dq, HeadRows<M> dk, HeadRows<M> dv,
                  int64_t t, int64_t d, M scale) {
  for (int64_t i = 0; i < t; ++i) {
    const M* g = dout.row(i);
    const M* o = out.row(i);
    w.delta[static_cast<size_t>(i)] =
        static_cast<M>(SumInOrder(d, [&](int64_t j) { return static_cast<double>(g[j]) * static_cast<double>(o[j]); }));
  }
  for (int64_t j0 = 0; j0 < t; j0 += kStrip) {
    const int64_t cols = std::min(kStrip, t - j0), rows = t - j0;  // queries j0..t-1 see these keys
    M* p = w.s.data();
    M* ds = w.ds.data();
    Gemm(false, true, rows, cols, d, q.row(j0), q.ld, k.row(j0), k.ld, M(0), p, kTile);
    ProbsTile(p, kTile, rows, cols, j0, j0, scale, w.lse.data());
    Gemm(true, false, cols, d, rows, p, kTile, dout.row(j0), dout.ld, M(0), dv.row(j0), dv.ld);
    Gemm(false, true, rows, cols, d, dout.row(j0), dout.ld, v.row(j0), v.ld, M(0), ds, kTile);
    ScoreGradTile(ds, p, kTile, rows, cols, j0, scale, w.delta.data());
    Gemm(true, false, cols, d, rows, ds, kTile, q.row(j0), q.ld, M(0), dk.row(j0), dk.ld);
    Gemm(false, false, rows, d, cols, ds, kTile, k.row(j0), k.ld, j0 == 0 ? M(0) : M(1), dq.row(j0), dq.ld);
  }
}

class CpuAttention final : public AttentionKernels {
 public:
  void Forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
               const Tensor& lse) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(q.dtype(), "CausalAttention", [&] {
      using S = scalar_t;
      using M = math_t;
      const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
      constexpr bool kConvert = !std::is_same_v<S, M>;
      Scratch<M> w(T, D, kConvert ? 3 : 0, kConvert ? 1 : 0);
      M* lse_all = static_cast<M*>(lse.raw_data());
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          const HeadRows<M> o = Output<S>(out, b, h, D, w.out[0]);
          ForwardHead(w, Input<S>(q, b, h, T, D, w.in[0]), Input<S>(k, b, h, T, D, w.in[1]),
                      Input<S>(v, b, h, T, D, w.in[2]), o, T, D, static_cast<M>(scale), lse_all + (b * H + h) * T);
          Finish<S>(o, out, b, h, T, D);
        }
      }
    });
  }

  void Backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                const Tensor& lse, double scale, bool /*deterministic: always*/, const Tensor& dq, const Tensor& dk,
                const Tensor& dv) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(q.dtype(), "CausalAttentionBackward", [&] {
      using S = scalar_t;
      using M = math_t;
      const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
      constexpr bool kConvert = !std::is_same_v<S, M>;
      Scratch<M> w(T, D, kConvert ? 5 : 0, kConvert ? 3 : 0);
      const M* lse_all = static_cast<const M*>(lse.raw_data());
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          std::copy(lse_all + (b * H + h) * T, lse_all + (b * H + h + 1) * T, w.lse.begin());
          const HeadRows<M> gq = Output<S>(dq, b, h, D, w.out[0]), gk = Output<S>(dk, b, h, D, w.out[1]),
                            gv = Output<S>(dv, b, h, D, w.out[2]);
          BackwardHead(w, Input<S>(q, b, h, T, D, w.in[0]), Input<S>(k, b, h, T, D, w.in[1]),
                       Input<S>(v, b, h, T, D, w.in[2]), Input<S>(grad, b, h, T, D, w.in[3]),
                       Input<S>(out, b, h, T, D, w.in[4]), gq, gk, gv, T, D, static_cast<M>(scale));
          Finish<S>(gq, dq, b, h, T, D);
          Finish<S>(gk, dk, b, h, T, D);
          Finish<S>(gv, dv, b, h, T, D);
        }
      }
    });
  }
};

}  // namespace

const AttentionKernels& CpuAttentionKernels() {
  static const CpuAttention kernels;
  return kernels;
}

}  // namespace psync::ops
