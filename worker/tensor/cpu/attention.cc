// CPU kernels of the attention family: flash-style causal attention, one
// (batch, head) at a time, single-threaded like the other nn kernels.
//
// Per head the rows of q, k, v (and grad, out) are first read into
// contiguous scratch of the math type M (float for float32 and bfloat16
// storage, double for float64): that is where bfloat16 becomes float, and it
// lets the tile products below run as OpenBLAS sgemm/dgemm on any input
// strides. Scratch is O(T * D) per head; nothing of size T x T exists.
//
// Forward, per query tile (kAttentionTile rows) and each key tile up to the
// diagonal, in order: S = Q K^T (gemm), z = scale * S in M (as CausalSoftmax
// scales), the row max m and sum l updated online (p = exp(z - m_new), the
// old accumulator and l rescaled by exp(m_old - m_new); l in double, summed
// in SumInOrder's order), acc += P V (gemm). Then out = acc / l and
// lse = m + log(l).
//
// Backward, per key tile and each query tile that sees it, in order: P =
// exp(scale Q K^T - lse) recomputed, dV += P^T dO, dP = dO V^T, dS = P (dP -
// delta) scale with delta_i = dO_i . out_i (double), dQ += dS K, dK += dS^T Q.
// Every sum runs in an order fixed by the shapes: the same bits every run.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "worker/tensor/cpu/cpu_util.h"
#include "worker/tensor/cpu/vec_math.h"
#include "worker/tensor/ops/attention_kernels.h"

namespace psync::ops {
namespace {

using cpu::Exp;
using cpu::MaxOf;
using cpu::SumInOrder;

constexpr int64_t kTile = kAttentionTile;

// The type the kernels compute in for a storage type.
template <typename S>
struct MathOf {
  using type = float;
};
template <>
struct MathOf<double> {
  using type = double;
};

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
};
template <typename S>
HeadRows<S> Head(const Tensor& t, int64_t b, int64_t h) {
  return {static_cast<S*>(t.raw_data()) + b * t.stride(0) + h * t.stride(1), t.stride(2)};
}

template <typename S, typename M>
void Load(HeadRows<S> src, int64_t t, int64_t d, M* dst) {
  for (int64_t i = 0; i < t; ++i) {
    const S* r = src.p + i * src.ld;
    M* o = dst + i * d;
    for (int64_t j = 0; j < d; ++j) o[j] = cpu::Convert<M>(r[j]);
  }
}

template <typename M, typename S>
void Store(const M* src, int64_t t, int64_t d, HeadRows<S> dst) {
  for (int64_t i = 0; i < t; ++i) {
    const M* r = src + i * d;
    S* o = dst.p + i * dst.ld;
    for (int64_t j = 0; j < d; ++j) o[j] = cpu::Convert<S>(r[j]);
  }
}

// Keys of tile j0.. that query i sees: j0 + [0, n).
inline int64_t VisibleKeys(int64_t i, int64_t j0, int64_t cols) { return std::clamp<int64_t>(i - j0 + 1, 0, cols); }

// One tile of the online softmax. s [rows, ld]: the scores of query rows
// i0.. against keys j0..j0+cols, replaced by p = exp(scale s - m_new) (0 for
// keys a row does not see); m, l: the rows' running max and sum, updated;
// alpha: per row, the factor exp(m_old - m_new) the accumulator needs.
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
    alpha[r] = Exp(m[r] - m_new);  // 0 on the first tile (m = -inf)
    for (int64_t j = 0; j < n; ++j) sr[j] = Exp(sr[j] * scale - m_new);
    for (int64_t j = n; j < cols; ++j) sr[j] = M(0);
    l[r] = l[r] * static_cast<double>(alpha[r]) + SumInOrder(n, [&](int64_t j) { return static_cast<double>(sr[j]); });
    m[r] = m_new;
  }
}

// acc [rows, d] row r *= alpha[r].
template <typename M>
PSYNC_CPU_CLONES void RescaleRows(M* acc, int64_t rows, int64_t d, const M* alpha) {
  for (int64_t r = 0; r < rows; ++r) {
    const M a = alpha[r];
    if (a == M(1)) continue;
    M* ar = acc + r * d;
    for (int64_t j = 0; j < d; ++j) ar[j] *= a;
  }
}

// Scratch of one forward, reused across heads.
template <typename M>
struct ForwardScratch {
  explicit ForwardScratch(int64_t t, int64_t d)
      : q(static_cast<size_t>(t * d)), k(q.size()), v(q.size()), o(q.size()), s(kTile * kTile), m(kTile), alpha(kTile),
        l(kTile) {}
  std::vector<M> q, k, v, o, s, m, alpha;
  std::vector<double> l;
};

// One head: q, k, v [t, d] contiguous -> o [t, d], lse [t].
template <typename M>
void ForwardHead(ForwardScratch<M>& w, int64_t t, int64_t d, M scale, M* lse) {
  for (int64_t i0 = 0; i0 < t; i0 += kTile) {
    const int64_t rows = std::min(kTile, t - i0);
    M* acc = w.o.data() + i0 * d;
    std::fill(acc, acc + rows * d, M(0));
    std::fill(w.m.begin(), w.m.end(), -std::numeric_limits<M>::infinity());
    std::fill(w.l.begin(), w.l.end(), 0.0);
    for (int64_t j0 = 0; j0 < i0 + rows; j0 += kTile) {  // key tiles up to the diagonal
      const int64_t cols = std::min(kTile, t - j0);
      Gemm(false, true, rows, cols, d, w.q.data() + i0 * d, d, w.k.data() + j0 * d, d, M(0), w.s.data(), kTile);
      SoftmaxTile(w.s.data(), kTile, rows, cols, i0, j0, scale, w.m.data(), w.l.data(), w.alpha.data());
      RescaleRows(acc, rows, d, w.alpha.data());
      Gemm(false, false, rows, d, cols, w.s.data(), kTile, w.v.data() + j0 * d, d, M(1), acc, d);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const double l = w.l[static_cast<size_t>(r)];
      M* ar = acc + r * d;
      for (int64_t j = 0; j < d; ++j) ar[j] = static_cast<M>(static_cast<double>(ar[j]) / l);
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

template <typename M>
struct BackwardScratch {
  explicit BackwardScratch(int64_t t, int64_t d)
      : q(static_cast<size_t>(t * d)), k(q.size()), v(q.size()), dout(q.size()), out(q.size()), dq(q.size()),
        dk(q.size()), dv(q.size()), lse(static_cast<size_t>(t)), delta(lse.size()), p(kTile * kTile),
        dp(kTile * kTile) {}
  std::vector<M> q, k, v, dout, out, dq, dk, dv, lse, delta, p, dp;
};

// One head: q, k, v, dout, out [t, d], lse [t] -> dq, dk, dv [t, d].
template <typename M>
void BackwardHead(BackwardScratch<M>& w, int64_t t, int64_t d, M scale) {
  for (int64_t i = 0; i < t; ++i) {
    const M* g = w.dout.data() + i * d;
    const M* o = w.out.data() + i * d;
    w.delta[static_cast<size_t>(i)] =
        static_cast<M>(SumInOrder(d, [&](int64_t j) { return static_cast<double>(g[j]) * static_cast<double>(o[j]); }));
  }
  std::fill(w.dq.begin(), w.dq.end(), M(0));
  std::fill(w.dk.begin(), w.dk.end(), M(0));
  std::fill(w.dv.begin(), w.dv.end(), M(0));
  for (int64_t j0 = 0; j0 < t; j0 += kTile) {
    const int64_t cols = std::min(kTile, t - j0);
    for (int64_t i0 = j0 / kTile * kTile; i0 < t; i0 += kTile) {  // query tiles that see key tile j0
      const int64_t rows = std::min(kTile, t - i0);
      const M* qi = w.q.data() + i0 * d;
      const M* gi = w.dout.data() + i0 * d;
      Gemm(false, true, rows, cols, d, qi, d, w.k.data() + j0 * d, d, M(0), w.p.data(), kTile);
      ProbsTile(w.p.data(), kTile, rows, cols, i0, j0, scale, w.lse.data());
      Gemm(true, false, cols, d, rows, w.p.data(), kTile, gi, d, M(1), w.dv.data() + j0 * d, d);
      Gemm(false, true, rows, cols, d, gi, d, w.v.data() + j0 * d, d, M(0), w.dp.data(), kTile);
      ScoreGradTile(w.dp.data(), w.p.data(), kTile, rows, cols, i0, scale, w.delta.data());
      Gemm(false, false, rows, d, cols, w.dp.data(), kTile, w.k.data() + j0 * d, d, M(1), w.dq.data() + i0 * d, d);
      Gemm(true, false, cols, d, rows, w.dp.data(), kTile, qi, d, M(1), w.dk.data() + j0 * d, d);
    }
  }
}

// Runs fn with a value of the storage type of dtype (float32, float64, bfloat16).
template <typename F>
void DispatchStorage(DType dtype, const char* op, F&& fn) {
  switch (dtype) {
    case kFloat32: return fn(float{});
    case kFloat64: return fn(double{});
    case kBFloat16: return fn(BFloat16{});
    default: ThrowUnsupportedDType(op, dtype);
  }
}

class CpuAttention final : public AttentionKernels {
 public:
  void Forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
               const Tensor& lse) const override {
    DispatchStorage(q.dtype(), "CausalAttention", [&](auto tag) {
      using S = decltype(tag);
      using M = typename MathOf<S>::type;
      const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
      ForwardScratch<M> w(T, D);
      M* lse_all = static_cast<M*>(lse.raw_data());
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          Load(Head<const S>(q, b, h), T, D, w.q.data());
          Load(Head<const S>(k, b, h), T, D, w.k.data());
          Load(Head<const S>(v, b, h), T, D, w.v.data());
          ForwardHead(w, T, D, static_cast<M>(scale), lse_all + (b * H + h) * T);
          Store(w.o.data(), T, D, Head<S>(out, b, h));
        }
      }
    });
  }

  void Backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                const Tensor& lse, double scale, bool /*deterministic: always*/, const Tensor& dq, const Tensor& dk,
                const Tensor& dv) const override {
    DispatchStorage(q.dtype(), "CausalAttentionBackward", [&](auto tag) {
      using S = decltype(tag);
      using M = typename MathOf<S>::type;
      const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
      BackwardScratch<M> w(T, D);
      const M* lse_all = static_cast<const M*>(lse.raw_data());
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          Load(Head<const S>(q, b, h), T, D, w.q.data());
          Load(Head<const S>(k, b, h), T, D, w.k.data());
          Load(Head<const S>(v, b, h), T, D, w.v.data());
          Load(Head<const S>(grad, b, h), T, D, w.dout.data());
          Load(Head<const S>(out, b, h), T, D, w.out.data());
          std::copy(lse_all + (b * H + h) * T, lse_all + (b * H + h + 1) * T, w.lse.begin());
          BackwardHead(w, T, D, static_cast<M>(scale));
          Store(w.dq.data(), T, D, Head<S>(dq, b, h));
          Store(w.dk.data(), T, D, Head<S>(dk, b, h));
          Store(w.dv.data(), T, D, Head<S>(dv, b, h));
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
