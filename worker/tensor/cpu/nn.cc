// CPU kernels of the neural-network family: softmax and cross-entropy (row
// sums in double, columns in order, as the CUDA kernels do), the GPT's
// layers, each layer's forward next to its backward (shapes in the comment
// above each pair), and the CNN's building blocks (im2col/col2im, channel
// bias and sums, max pooling; ops/nn_conv.cc adds the matrix products).
//
// The layer kernels are plain loops over contiguous rows, templated over
// the storage types (float, double, BFloat16: dtype.h) and computing in
// their math type (float for BFloat16; the float64 gradient checks run these
// very loops in double), loading and storing through cpu::Load/Store (the
// identity for float and double, so the float32 bits are the plain loops'), with
// sums in double in a fixed order (cpu/vec_math.h SumInOrder) and exp as a
// vectorizable polynomial (cpu/vec_math.h Exp). They are compiled for the
// x86-64 baseline and AVX2 (PSYNC_CPU_CLONES) with the same results.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/tensor/cpu/cpu_util.h"
#include "worker/tensor/cpu/vec_math.h"
#include "worker/tensor/ops/check.h"
#include "worker/tensor/ops/nn_kernels.h"

namespace psync::ops {
namespace {

using cpu::Exp;
using cpu::Load;
using cpu::MaxOf;
using cpu::Store;
using cpu::SumInOrder;
using cpu::SumInOrder2;

// log(sum_j exp(x_j - max)) + max for one row (cols >= 1): exp in the
// row's dtype (vec_math.h Exp, as torch's vectorized log_softmax computes it
// in float), the sum in double in a fixed order (SumInOrder), so it
// vectorizes inside the PSYNC_CPU_CLONES kernels below.
template <typename S, typename T = MathType<S>>
PSYNC_CPU_INLINE double RowLogSumExp(const S* x, int64_t cols) {
  const T mx = MaxOf<T>(cols, [&](int64_t j) { return Load<T>(x[j]); });
  return std::log(SumInOrder(cols, [&](int64_t j) { return static_cast<double>(Exp(Load<T>(x[j]) - mx)); })) +
         static_cast<double>(mx);
}

int64_t Target(const int64_t* targets, int64_t row, int64_t cols, const char* op) {
  const int64_t c = targets[row];
  if (c < 0 || c >= cols) {
    throw TensorError(absl::StrCat(op, ": target ", c, " at row ", row, " is not a class index in [0, ", cols, ")"));
  }
  return c;
}

// ---------------------------------------------------------------- softmax, cross-entropy
// x, y [rows, cols]. LogSoftmax: y = x - logsumexp(row). CrossEntropy: the
// sum over rows of logsumexp(row) - x[target] (the caller divides by rows).
// Backward: dx = g * (softmax(row) - onehot(target)), g already divided by
// rows. A target outside [0, cols) throws (naming the op).
template <typename T>
PSYNC_CPU_CLONES void LogSoftmaxRows(const T* x, int64_t rows, int64_t cols, T* y) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* xr = x + i * cols;
    T* yr = y + i * cols;
    const double lse = RowLogSumExp(xr, cols);
    for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>(xr[j] - lse);
  }
}

template <typename S>
PSYNC_CPU_CLONES double CrossEntropySum(const S* x, const int64_t* targets, int64_t rows, int64_t cols) {
  double total = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    const S* xr = x + i * cols;
    const int64_t c = Target(targets, i, cols, "CrossEntropy");
    total += RowLogSumExp(xr, cols) - Load<double>(xr[c]);
  }
  return total;
}

// `e`: a row of cols math-type values to keep exp(x_j - max) in; dx itself
// when it has the math type.
template <typename S, typename T = MathType<S>>
PSYNC_CPU_CLONES void CrossEntropyBackwardRows(const S* x, const int64_t* targets, double g, int64_t rows,
                                               int64_t cols, S* dx, T* e) {
  for (int64_t i = 0; i < rows; ++i) {
    const S* xr = x + i * cols;
    S* yr = dx + i * cols;
    T* er = std::is_same_v<S, T> ? reinterpret_cast<T*>(yr) : e;
    const int64_t c = Target(targets, i, cols, "CrossEntropyBackward");
    // One exp per element: e_j = exp(x_j - max) is kept until the sum is
    // known, then dx_j = g * e_j / sum (minus g at the target).
    const T mx = MaxOf<T>(cols, [&](int64_t j) { return Load<T>(xr[j]); });
    const double sum = SumInOrder(cols, [&](int64_t j) {
      const T ej = Exp(Load<T>(xr[j]) - mx);
      er[j] = ej;
      return static_cast<double>(ej);
    });
    const double inv = 1.0 / sum;
    const double pc = static_cast<double>(er[c]) * inv;
    if constexpr (std::is_same_v<S, T>) {
      for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>(g * (static_cast<double>(er[j]) * inv));
      yr[c] = static_cast<T>(g * (pc - 1.0));
    } else {
      // The same values in the math type first, then one rounding pass (two
      // simple loops vectorize; one mixing double, float and bfloat16 does not).
      for (int64_t j = 0; j < cols; ++j) er[j] = static_cast<T>(g * (static_cast<double>(er[j]) * inv));
      er[c] = static_cast<T>(g * (pc - 1.0));
      for (int64_t j = 0; j < cols; ++j) yr[j] = Store<S>(er[j]);
    }
  }
}

// ---------------------------------------------------------------- fused classifier
// CrossEntropySum's term and CrossEntropyBackwardRows' gradient of each row
// in one pass, written over the row (x [rows] with row stride ld): for
// float32 and float64 the same arithmetic in the same order, hence the same
// bits as the two kernels above. bfloat16 rows compute in float and read
// the row once more instead of keeping exp in it (a bf16 copy of exp would
// round the gradient twice). Targets are checked by the caller first.
template <typename S>
using ClassifierMath = std::conditional_t<std::is_same_v<S, double>, double, float>;

template <typename S>
PSYNC_CPU_CLONES double FusedClassifierRows(S* x, int64_t ld, const int64_t* targets, double g, int64_t rows,
                                            int64_t cols) {
  using M = ClassifierMath<S>;
  double total = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    S* xr = x + i * ld;
    const int64_t c = targets[i];
    const M mx = MaxOf<M>(cols, [&](int64_t j) { return cpu::Convert<M>(xr[j]); });
    const M xc = cpu::Convert<M>(xr[c]);
    double sum;
    if constexpr (cpu::kIsHalf<S>) {
      sum = SumInOrder(cols, [&](int64_t j) { return static_cast<double>(Exp(cpu::Convert<M>(xr[j]) - mx)); });
    } else {
      sum = SumInOrder(cols, [&](int64_t j) {
        const M e = Exp(xr[j] - mx);
        xr[j] = e;
        return static_cast<double>(e);
      });
    }
    total += (std::log(sum) + static_cast<double>(mx)) - static_cast<double>(xc);
    const double inv = 1.0 / sum;
    if constexpr (cpu::kIsHalf<S>) {
      for (int64_t j = 0; j < cols; ++j) {
        const double e = static_cast<double>(Exp(cpu::Convert<M>(xr[j]) - mx));
        xr[j] = cpu::Convert<S>(static_cast<M>(g * ((j == c ? e - sum : e) * inv)));
      }
    } else {
      const double pc = static_cast<double>(xr[c]) * inv;
      for (int64_t j = 0; j < cols; ++j) xr[j] = static_cast<S>(g * (static_cast<double>(xr[j]) * inv));
      xr[c] = static_cast<S>(g * (pc - 1.0));
    }
  }
  return total;
}

// x [rows] (row stride ld) *= f.
template <typename S>
PSYNC_CPU_CLONES void ScaleRows(S* x, int64_t ld, int64_t rows, int64_t cols, double f) {
  for (int64_t i = 0; i < rows; ++i) {
    S* xr = x + i * ld;
    for (int64_t j = 0; j < cols; ++j) {
      xr[j] = cpu::Convert<S>(static_cast<ClassifierMath<S>>(static_cast<double>(cpu::Convert<ClassifierMath<S>>(xr[j])) * f));
    }
  }
}

// Runs fn with a value of the storage type of dtype (float32, float64, bfloat16).
template <typename F>
void DispatchClassifier(DType dtype, const char* op, F&& fn) {
  switch (dtype) {
    case kFloat32: return fn(float{});
    case kFloat64: return fn(double{});
    case kBFloat16: return fn(BFloat16{});
    default: ThrowUnsupportedDType(op, dtype);
  }
}

// ---------------------------------------------------------------- Embedding
// Forward: ids [n] int64, weight [V, C] -> y [n, C], y[i] = weight[ids[i]].
// Backward: grad [n, C] -> dweight [V, C], row v = sum of grad[i] over
// ids[i] == v, in increasing i (a stable counting sort by id gives each
// row's positions in order), accumulated in double: no two positions ever
// race for a row, so the bits never depend on timing.

// "[1, 17]": flat position i of `shape` as an index.
std::string IndexIn(const Shape& shape, int64_t i) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return absl::StrCat("[", absl::StrJoin(idx, ", "), "]");
}

// Every id in [0, rows of table), else TensorError naming the first bad
// id's position.
void CheckIds(const char* op, const Tensor& ids, const char* table_name, const Tensor& table) {
  const int64_t* p = ids.data<int64_t>();
  const int64_t rows = table.size(0);
  for (int64_t i = 0, n = ids.numel(); i < n; ++i) {
    if (p[i] < 0 || p[i] >= rows) {
      throw TensorError(absl::StrCat(op, ": ids", IndexIn(ids.shape(), i), " = ", p[i], " (ids ",
                                     ops::check::Describe(ids), ") is not a row of ", table_name, " ",
                                     ops::check::Describe(table), "; ids must be in [0, ", rows, ")"));
    }
  }
}

template <typename T>
void EmbeddingRows(const int64_t* ids, const T* weight, int64_t n, int64_t c, T* y) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(y + i * c, weight + ids[i] * c, static_cast<size_t>(c) * sizeof(T));
}

// order[start[v] .. start[v+1]) are the positions with id v, increasing.
template <typename T>
PSYNC_CPU_CLONES void EmbeddingBackwardRows(const T* grad, const int64_t* order, const int64_t* start, int64_t v_rows,
                                            int64_t c, T* dweight, double* acc) {
  for (int64_t v = 0; v < v_rows; ++v) {
    for (int64_t j = 0; j < c; ++j) acc[j] = 0.0;
    for (int64_t k = start[v]; k < start[v + 1]; ++k) {
      const T* g = grad + order[k] * c;
      for (int64_t j = 0; j < c; ++j) acc[j] += static_cast<double>(g[j]);
    }
    T* out = dweight + v * c;
    for (int64_t j = 0; j < c; ++j) out[j] = static_cast<T>(acc[j]);
  }
}

// ---------------------------------------------------------------- LayerNorm
// Forward: x, y [rows, C]; weight, bias [C]; mean, rstd [rows] (saved for
// the backward, in x's dtype). Per row, in double: mean, then the biased
// variance as the mean of squared deviations (two passes: no cancellation);
// rstd = 1/sqrt(var + eps); xhat = (x - mean) * rstd with the saved
// (rounded) mean and rstd, so the backward sees exactly the forward's xhat;
// y = xhat * weight + bias.
//
// x has storage X, y storage Y (either may be BFloat16); the math type T
// (float, or double for double storage) holds weight, bias, mean and rstd.
template <typename X, typename Y, typename T>
PSYNC_CPU_INLINE void LayerNormRow(const X* xr, const T* weight, const T* bias, double eps, int64_t c, Y* yr, T* mean,
                                   T* rstd) {
  const double inv_c = 1.0 / static_cast<double>(c);
  const double m = SumInOrder(c, [&](int64_t j) { return Load<double>(xr[j]); }) * inv_c;
  const double var = SumInOrder(c, [&](int64_t j) {
                       const double d = Load<double>(xr[j]) - m;
                       return d * d;
                     }) * inv_c;
  const T mt = static_cast<T>(m), rt = static_cast<T>(1.0 / std::sqrt(var + eps));
  *mean = mt;
  *rstd = rt;
  for (int64_t j = 0; j < c; ++j) yr[j] = Store<Y>((Load<T>(xr[j]) - mt) * rt * weight[j] + bias[j]);
}

template <typename X, typename Y, typename T>
PSYNC_CPU_CLONES void LayerNormRows(const X* x, const T* weight, const T* bias, double eps, int64_t rows, int64_t c,
                                    Y* y, T* mean, T* rstd) {
  for (int64_t r = 0; r < rows; ++r) LayerNormRow(x + r * c, weight, bias, eps, c, y + r * c, mean + r, rstd + r);
}

// ResidualLayerNorm: per row, h = x + a (rounded to h's type, as Add
// rounds), then LayerNormRow of that h while it is in cache.
template <typename A, typename Y, typename T>
PSYNC_CPU_CLONES void ResidualLayerNormRows(const T* x, const A* a, const T* weight, const T* bias, double eps,
                                            int64_t rows, int64_t c, T* h, Y* y, T* mean, T* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * c;
    const A* ar = a + r * c;
    T* hr = h + r * c;
    for (int64_t j = 0; j < c; ++j) hr[j] = xr[j] + Load<T>(ar[j]);
    LayerNormRow(hr, weight, bias, eps, c, y + r * c, mean + r, rstd + r);
  }
}

// Backward: grad, x, dx [rows, C]; dweight, dbias [C]. With gw = grad *
// weight: dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) per row (the
// two means summed in double, the rest elementwise in the math type, as
// torch), plus residual_grad when given (rg: null or x's storage);
// dweight = sum over rows of grad * xhat, dbias = sum of grad: column sums in
// double over chunks of kLayerNormRowChunk rows (each chunk in row order),
// the chunks summed in order, exactly as the CUDA kernels do. `scratch`
// holds 4 C doubles. grad has storage G, x and dx storage X.
template <typename G, typename X, typename T>
PSYNC_CPU_CLONES void LayerNormBackwardRows(const G* grad, const X* x, const T* weight, const T* mean, const T* rstd,
                                            const X* rg, int64_t rows, int64_t c, X* dx, T* dweight, T* dbias,
                                            double* scratch) {
  double* total_w = scratch;
  double* total_b = scratch + c;
  double* part_w = scratch + 2 * c;
  double* part_b = scratch + 3 * c;
  for (int64_t j = 0; j < c; ++j) total_w[j] = total_b[j] = 0.0;
  const double inv_c = 1.0 / static_cast<double>(c);
  for (int64_t r0 = 0; r0 < rows; r0 += kLayerNormRowChunk) {
    for (int64_t j = 0; j < c; ++j) part_w[j] = part_b[j] = 0.0;
    for (int64_t r = r0; r < std::min(rows, r0 + kLayerNormRowChunk); ++r) {
      const G* gr = grad + r * c;
      const X* xr = x + r * c;
      X* dxr = dx + r * c;
      const T m = mean[r], rs = rstd[r];
      double gw_sum, gwx_sum;
      SumInOrder2(
          c,
          [&](int64_t j, double* gw, double* gwx) {
            const T xhat = (Load<T>(xr[j]) - m) * rs;
            *gw = Load<double>(gr[j]) * static_cast<double>(weight[j]);
            *gwx = *gw * static_cast<double>(xhat);
          },
          &gw_sum, &gwx_sum);
      const double gw_mean = gw_sum * inv_c, gwx_mean = gwx_sum * inv_c;
      const T a = static_cast<T>(gw_mean), b = static_cast<T>(gwx_mean);
      if (rg == nullptr) {
        for (int64_t j = 0; j < c; ++j) {
          const T g = Load<T>(gr[j]);
          const T xhat = (Load<T>(xr[j]) - m) * rs;
          dxr[j] = Store<X>(rs * ((g * weight[j] - a) - xhat * b));
          part_w[j] += static_cast<double>(g) * static_cast<double>(xhat);
          part_b[j] += static_cast<double>(g);
        }
      } else {
        const X* rgr = rg + r * c;
        for (int64_t j = 0; j < c; ++j) {
          const T g = Load<T>(gr[j]);
          const T xhat = (Load<T>(xr[j]) - m) * rs;
          dxr[j] = Store<X>(rs * ((g * weight[j] - a) - xhat * b) + Load<T>(rgr[j]));
          part_w[j] += static_cast<double>(g) * static_cast<double>(xhat);
          part_b[j] += static_cast<double>(g);
        }
      }
    }
    for (int64_t j = 0; j < c; ++j) {
      total_w[j] += part_w[j];
      total_b[j] += part_b[j];
    }
  }
  for (int64_t j = 0; j < c; ++j) {
    dweight[j] = static_cast<T>(total_w[j]);
    dbias[j] = static_cast<T>(total_b[j]);
  }
}

// ---------------------------------------------------------------- GELU (tanh form)
// Forward: y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// computed as x * sigmoid(2u) = x / (1 + exp(-2u)) (1 + tanh(u) =
// 2 sigmoid(2u)), which keeps its precision for negative x.
// Backward: with s = sigmoid(2u), gelu'(x) = s + 2 x s (1 - s) u'(x),
// u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <typename T>
constexpr T kGeluK = static_cast<T>(0.79788456080286535588);  // sqrt(2/pi)
template <typename T>
constexpr T kGeluC = static_cast<T>(0.044715);

template <typename S, typename T = MathType<S>>
PSYNC_CPU_CLONES void GeluForward(const S* x, S* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = Load<T>(x[i]);
    const T u = kGeluK<T> * (v + kGeluC<T> * v * v * v);
    y[i] = Store<S>(v / (T(1) + Exp(T(-2) * u)));
  }
}

// grad of storage G, x and dx of storage X, computed in T.
template <typename G, typename X, typename T>
PSYNC_CPU_CLONES void GeluBackwardKernel(const G* grad, const X* x, X* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = Load<T>(x[i]);
    const T u = kGeluK<T> * (v + kGeluC<T> * v * v * v);
    const T s = T(1) / (T(1) + Exp(T(-2) * u));
    const T du = kGeluK<T> * (T(1) + T(3) * kGeluC<T> * v * v);
    dx[i] = Store<X>(Load<T>(grad[i]) * (s + T(2) * v * s * (T(1) - s) * du));
  }
}

// ---------------------------------------------------------------- causal softmax
// Forward: x, y [rows, T], row r is query position i = r % T. With z = s x
// (s = scale in x's dtype, as torch scales a float tensor): y[j] =
// exp(z_j - max z) / sum_k<=i exp(z_k - max z) for j <= i (the sum in
// double), 0 for j > i.
// Backward: dx[j] = s * y[j] * (grad[j] - sum_k<=i grad[k] y[k]) for j <= i.
// For BFloat16 x the scaled score is rounded to BFloat16 before the
// softmax (torch's `att * scale` on a bfloat16 tensor), and the scores and
// exps are kept in `e` (t floats) rather than in y; float and double keep
// the exps in y itself (their original loop, bit for bit).
template <typename S, typename T = MathType<S>>
PSYNC_CPU_CLONES void CausalSoftmaxRows(const S* x, double scale, int64_t rows, int64_t t, S* y, T* e) {
  const T s = static_cast<T>(scale);
  for (int64_t r = 0; r < rows; ++r) {
    const S* xr = x + r * t;
    S* yr = y + r * t;
    const int64_t n = r % t + 1;
    if constexpr (std::is_same_v<S, T>) {
      const T mx = MaxOf<T>(n, [&](int64_t j) { return xr[j] * s; });
      for (int64_t j = 0; j < n; ++j) yr[j] = Exp(xr[j] * s - mx);
      const double sum = SumInOrder(n, [&](int64_t j) { return static_cast<double>(yr[j]); });
      for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<T>(static_cast<double>(yr[j]) / sum);
      for (int64_t j = n; j < t; ++j) yr[j] = T(0);
    } else {
      // The scaled scores once into e (rounded to S, as torch's bf16 `att * scale`).
      for (int64_t j = 0; j < n; ++j) e[j] = Load<T>(Store<S>(Load<T>(xr[j]) * s));
      const T mx = MaxOf<T>(n, [&](int64_t j) { return e[j]; });
      for (int64_t j = 0; j < n; ++j) e[j] = Exp(e[j] - mx);
      const double sum = SumInOrder(n, [&](int64_t j) { return static_cast<double>(e[j]); });
      for (int64_t j = 0; j < n; ++j) yr[j] = Store<S>(static_cast<T>(static_cast<double>(e[j]) / sum));
      for (int64_t j = n; j < t; ++j) yr[j] = Store<S>(T(0));
    }
  }
}

template <typename S, typename T = MathType<S>>
PSYNC_CPU_CLONES void CausalSoftmaxBackwardRows(const S* grad, const S* y, double scale, int64_t rows, int64_t t,
                                                S* dx) {
  const double s = static_cast<double>(static_cast<T>(scale));
  for (int64_t r = 0; r < rows; ++r) {
    const S* gr = grad + r * t;
    const S* yr = y + r * t;
    S* dr = dx + r * t;
    const int64_t n = r % t + 1;
    const double dot = SumInOrder(n, [&](int64_t j) { return Load<double>(gr[j]) * Load<double>(yr[j]); });
    for (int64_t j = 0; j < n; ++j) {
      dr[j] = Store<S>(static_cast<T>(s * Load<double>(yr[j]) * (Load<double>(gr[j]) - dot)));
    }
    for (int64_t j = n; j < t; ++j) dr[j] = Store<S>(T(0));
  }
}

// ---------------------------------------------------------------- CNN layers
// Im2Col / Col2Im for one image: x [C, H, W] <-> col [K, L] (ops/nn_kernels.h).
// Row k = (c, i, j) of col, output row oh, reads input row ih = oh*s - p + i
// and columns iw = ow*s + (j - p); the output columns whose iw lies inside
// the image are [lo, hi), the rest are padding.
void InsideColumns(int64_t off, const Conv2dGeometry& g, int64_t* lo, int64_t* hi) {
  const int64_t s = g.stride;
  *lo = off >= 0 ? 0 : (-off + s - 1) / s;
  *hi = g.w - 1 - off < 0 ? 0 : std::min(g.wo, (g.w - 1 - off) / s + 1);
  if (*hi < *lo) *hi = *lo;
}

template <typename T>
PSYNC_CPU_CLONES void Im2ColImage(const T* x, const Conv2dGeometry& g, T* col) {
  const int64_t s = g.stride, p = g.padding, L = g.ho * g.wo;
  for (int64_t c = 0; c < g.cin; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * L;
        int64_t lo, hi;
        InsideColumns(j - p, g, &lo, &hi);
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          T* out = row + oh * g.wo;
          const int64_t ih = oh * s - p + i;
          if (ih < 0 || ih >= g.h) {
            for (int64_t ow = 0; ow < g.wo; ++ow) out[ow] = T(0);
            continue;
          }
          const T* xr = x + (c * g.h + ih) * g.w;
          const int64_t off = j - p;
          for (int64_t ow = 0; ow < lo; ++ow) out[ow] = T(0);
          if (s == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow] = xr[ow + off];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow] = xr[ow * s + off];
          }
          for (int64_t ow = hi; ow < g.wo; ++ow) out[ow] = T(0);
        }
      }
    }
  }
}

// The adjoint: rows k in increasing order add into dx, so each dx element
// receives its terms in increasing (i, j) order after an exact 0, the order
// the CUDA kernel sums them in.
template <typename T>
PSYNC_CPU_CLONES void Col2ImImage(const T* col, const Conv2dGeometry& g, T* dx) {
  const int64_t s = g.stride, p = g.padding, L = g.ho * g.wo;
  for (int64_t e = 0, n = g.cin * g.h * g.w; e < n; ++e) dx[e] = T(0);
  for (int64_t c = 0; c < g.cin; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * L;
        int64_t lo, hi;
        InsideColumns(j - p, g, &lo, &hi);
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * s - p + i;
          if (ih < 0 || ih >= g.h) continue;
          const T* in = row + oh * g.wo;
          T* dr = dx + (c * g.h + ih) * g.w;
          const int64_t off = j - p;
          if (s == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) dr[ow + off] += in[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dr[ow * s + off] += in[ow];
          }
        }
      }
    }
  }
}

// Max pooling of one plane x [h, w] -> y, idx [h / k, w / k], as torch's
// CPU loop: per window, start at -inf with the window's first position and
// take each value, in row-major window order, that is greater or NaN.
// Starting from the first value instead is the same (it is taken unless it
// is -inf, and then nothing changes). Written with selects (a branch on
// random data mispredicts half the time), as a loop over a whole output row
// per window position, which vectorizes; the 2x2 case in one pass.
template <typename T>
PSYNC_CPU_INLINE void TakeIfGreater(T v, int64_t at, T* best, int64_t* best_at) {
  const bool take = (v > *best) | (v != v);  // v != v: NaN
  *best = take ? v : *best;
  *best_at = take ? at : *best_at;
}

template <typename T>
PSYNC_CPU_CLONES void MaxPoolPlane(const T* x, int64_t h, int64_t w, int64_t k, T* y, int64_t* idx) {
  const int64_t ho = h / k, wo = w / k;
  for (int64_t oh = 0; oh < ho; ++oh) {
    T* yr = y + oh * wo;
    int64_t* ir = idx + oh * wo;
    const int64_t base = oh * k * w;  // the windows' first row
    if (k == 2) {
      const T* r0 = x + base;
      const T* r1 = r0 + w;
      for (int64_t ow = 0; ow < wo; ++ow) {
        const int64_t c = 2 * ow;
        T best = r0[c];
        int64_t at = base + c;
        TakeIfGreater(r0[c + 1], base + c + 1, &best, &at);
        TakeIfGreater(r1[c], base + w + c, &best, &at);
        TakeIfGreater(r1[c + 1], base + w + c + 1, &best, &at);
        yr[ow] = best;
        ir[ow] = at;
      }
      continue;
    }
    for (int64_t ow = 0; ow < wo; ++ow) {
      yr[ow] = x[base + ow * k];
      ir[ow] = base + ow * k;
    }
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = i == 0 ? 1 : 0; j < k; ++j) {
        const int64_t off = base + i * w + j;  // window ow's element (i, j) is x[off + ow * k]
        for (int64_t ow = 0; ow < wo; ++ow) TakeIfGreater(x[off + ow * k], off + ow * k, &yr[ow], &ir[ow]);
      }
    }
  }
}

// y [n, C, L] += bias[c].
template <typename T>
PSYNC_CPU_CLONES void AddChannelBiasRows(T* y, const T* bias, int64_t n, int64_t c, int64_t l) {
  for (int64_t r = 0; r < n * c; ++r) {
    const T b = bias[r % c];
    T* row = y + r * l;
    for (int64_t j = 0; j < l; ++j) row[j] += b;
  }
}

// dbias[c] = sum over images (in order) of SumInOrder over the row grad[b, c].
template <typename T>
PSYNC_CPU_CLONES void ChannelSumRows(const T* grad, int64_t n, int64_t c, int64_t l, T* dbias) {
  for (int64_t ch = 0; ch < c; ++ch) {
    double total = 0.0;
    for (int64_t b = 0; b < n; ++b) {
      const T* row = grad + (b * c + ch) * l;
      total += SumInOrder(l, [&](int64_t j) { return static_cast<double>(row[j]); });
    }
    dbias[ch] = static_cast<T>(total);
  }
}

// acc[j] += parts[b, j], b in order.
template <typename T>
PSYNC_CPU_CLONES void AccumulatePartRows(const T* parts, int64_t n, int64_t m, double* acc) {
  for (int64_t b = 0; b < n; ++b) {
    const T* row = parts + b * m;
    for (int64_t j = 0; j < m; ++j) acc[j] += static_cast<double>(row[j]);
  }
}

// dx [planes, h, w] = grad [planes, h/k, w/k] at the indices, 0 elsewhere.
// Returns the flat position of the first index outside its window (the
// rest of dx is then unspecified), or -1.
template <typename T>
PSYNC_CPU_CLONES int64_t MaxPoolBackwardPlanes(const T* grad, const int64_t* indices, int64_t planes, int64_t h,
                                               int64_t w, int64_t k, T* dx) {
  const int64_t ho = h / k, wo = w / k;
  for (int64_t e = 0, n = planes * h * w; e < n; ++e) dx[e] = T(0);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oh = 0; oh < ho; ++oh) {
      for (int64_t ow = 0; ow < wo; ++ow) {
        const int64_t o = (p * ho + oh) * wo + ow, at = indices[o];
        // In the window iff at - (its first position) is i * w + j for some i, j < k (no division).
        const int64_t rel = at - (oh * k * w + ow * k);
        bool inside = false;
        for (int64_t i = 0; i < k; ++i) inside |= rel - i * w >= 0 && rel - i * w < k;
        if (!inside) return o;
        dx[p * h * w + at] = grad[o];
      }
    }
  }
  return -1;
}

using cpu::In;
using cpu::Out;

class CpuNn final : public NnKernels {
 public:
  void LogSoftmax(const Tensor& x, const Tensor& y) const override {
    if (x.size(1) == 0) return;  // rows without columns: nothing to read
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "LogSoftmax", [&] {
      LogSoftmaxRows(In<scalar_t>(x), x.size(0), x.size(1), Out<scalar_t>(y));
    });
  }

  void CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& loss) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(logits.dtype(), "CrossEntropy", [&] {
      const int64_t rows = logits.size(0), cols = logits.size(1);
      const double total = CrossEntropySum(In<scalar_t>(logits), targets.data<int64_t>(), rows, cols);
      Out<math_t>(loss)[0] = static_cast<math_t>(total / static_cast<double>(rows));
    });
  }

  void CrossEntropyBackward(const Tensor& grad, const Tensor& logits, const Tensor& targets,
                            const Tensor& dlogits) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(logits.dtype(), "CrossEntropyBackward", [&] {
      const int64_t rows = logits.size(0), cols = logits.size(1);
      const double g = static_cast<double>(In<math_t>(grad)[0]) / static_cast<double>(rows);
      std::vector<math_t> e(std::is_same_v<scalar_t, math_t> ? 0 : static_cast<size_t>(cols));
      CrossEntropyBackwardRows(In<scalar_t>(logits), targets.data<int64_t>(), g, rows, cols, Out<scalar_t>(dlogits),
                               e.data());
    });
  }

  void FusedClassifier(const Tensor& logits, const Tensor& targets, float grad_scale,
                       const Tensor& loss) const override {
    const int64_t rows = logits.size(0), cols = logits.size(1);
    const int64_t* t = targets.data<int64_t>();
    for (int64_t i = 0; i < rows; ++i) Target(t, i, cols, "FusedClassifier");  // before anything is written
    const double g = static_cast<double>(grad_scale) / static_cast<double>(rows);
    DispatchClassifier(logits.dtype(), "FusedClassifier", [&](auto tag) {
      using S = decltype(tag);
      const double total = FusedClassifierRows(Out<S>(logits), logits.stride(0), t, g, rows, cols);
      if (loss.dtype() == kFloat64) {
        Out<double>(loss)[0] = total / static_cast<double>(rows);
      } else {
        Out<float>(loss)[0] = static_cast<float>(total / static_cast<double>(rows));
      }
    });
  }

  void RescaleClassifierGrad(const Tensor& dlogits, const Tensor& grad, float grad_scale) const override {
    const double g = grad.dtype() == kFloat64 ? In<double>(grad)[0] : static_cast<double>(In<float>(grad)[0]);
    if (g == static_cast<double>(grad_scale)) return;
    DispatchClassifier(dlogits.dtype(), "RescaleClassifierGrad", [&](auto tag) {
      using S = decltype(tag);
      ScaleRows(Out<S>(dlogits), dlogits.stride(0), dlogits.size(0), dlogits.size(1), g / grad_scale);
    });
  }

  void Embedding(const Tensor& ids, const Tensor& weight, const Tensor& y) const override {
    CheckIds("Embedding", ids, "weight", weight);
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "Embedding", [&] {
      EmbeddingRows(ids.data<int64_t>(), In<scalar_t>(weight), ids.numel(), weight.size(1), Out<scalar_t>(y));
    });
  }

  void EmbeddingBackward(const Tensor& grad, const Tensor& ids, const Tensor& dweight) const override {
    const int64_t v_rows = dweight.size(0), c = dweight.size(1), n = ids.numel();
    CheckIds("EmbeddingBackward", ids, "the weight gradient", dweight);
    // Stable counting sort of the positions by id.
    const int64_t* pid = ids.data<int64_t>();
    std::vector<int64_t> start(static_cast<size_t>(v_rows) + 1, 0), order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ++start[static_cast<size_t>(pid[i]) + 1];
    for (int64_t v = 0; v < v_rows; ++v) start[static_cast<size_t>(v) + 1] += start[static_cast<size_t>(v)];
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(next[static_cast<size_t>(pid[i])]++)] = i;
    std::vector<double> acc(static_cast<size_t>(c));
    PSYNC_DISPATCH_FLOAT_TYPES(dweight.dtype(), "EmbeddingBackward", [&] {
      EmbeddingBackwardRows(In<scalar_t>(grad), order.data(), start.data(), v_rows, c, Out<scalar_t>(dweight),
                            acc.data());
    });
  }

  void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                 const Tensor& mean, const Tensor& rstd) const override {
    PSYNC_DISPATCH_FLOAT_PAIR_AND_BF16(x.dtype(), y.dtype(), "LayerNorm", [&] {
      LayerNormRows(In<a_t>(x), In<math_t>(weight), In<math_t>(bias), eps, x.size(0), x.size(1), Out<b_t>(y),
                    Out<math_t>(mean), Out<math_t>(rstd));
    });
  }

  void ResidualLayerNorm(const Tensor& x, const Tensor& a, const Tensor& weight, const Tensor& bias, double eps,
                         const Tensor& h, const Tensor& y, const Tensor& mean, const Tensor& rstd) const override {
    PSYNC_DISPATCH_FLOAT_PAIR_AND_BF16(a.dtype(), y.dtype(), "ResidualLayerNorm", [&] {
      ResidualLayerNormRows(In<math_t>(x), In<a_t>(a), In<math_t>(weight), In<math_t>(bias), eps, x.size(0), x.size(1),
                            Out<math_t>(h), Out<b_t>(y), Out<math_t>(mean), Out<math_t>(rstd));
    });
  }

  void LayerNormBackward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& residual_grad, const Tensor& dx, const Tensor& dweight,
                         const Tensor& dbias) const override {
    std::vector<double> scratch(4 * static_cast<size_t>(x.size(1)));
    PSYNC_DISPATCH_FLOAT_PAIR_AND_BF16(grad.dtype(), x.dtype(), "LayerNormBackward", [&] {
      LayerNormBackwardRows(In<a_t>(grad), In<b_t>(x), In<math_t>(weight), In<math_t>(mean), In<math_t>(rstd),
                            residual_grad.defined() ? In<b_t>(residual_grad) : nullptr, x.size(0), x.size(1),
                            Out<b_t>(dx), Out<math_t>(dweight), Out<math_t>(dbias), scratch.data());
    });
  }

  void Gelu(const Tensor& x, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(y.dtype(), "Gelu",
                                        [&] { GeluForward(In<scalar_t>(x), Out<scalar_t>(y), y.numel()); });
  }

  void GeluBackward(const Tensor& grad, const Tensor& x, const Tensor& dx) const override {
    PSYNC_DISPATCH_FLOAT_PAIR_AND_BF16(grad.dtype(), x.dtype(), "GeluBackward", [&] {
      GeluBackwardKernel<a_t, b_t, math_t>(In<a_t>(grad), In<b_t>(x), Out<b_t>(dx), dx.numel());
    });
  }

  void CausalSoftmax(const Tensor& x, double scale, const Tensor& y) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(y.dtype(), "CausalSoftmax", [&] {
      std::vector<math_t> e(std::is_same_v<scalar_t, math_t> ? 0 : static_cast<size_t>(x.size(1)));
      CausalSoftmaxRows(In<scalar_t>(x), scale, x.size(0), x.size(1), Out<scalar_t>(y), e.data());
    });
  }

  void CausalSoftmaxBackward(const Tensor& grad, const Tensor& y, double scale, const Tensor& dx) const override {
    PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(dx.dtype(), "CausalSoftmaxBackward", [&] {
      CausalSoftmaxBackwardRows(In<scalar_t>(grad), In<scalar_t>(y), scale, y.size(0), y.size(1), Out<scalar_t>(dx));
    });
  }

  void Im2Col(const Tensor& x, const Conv2dGeometry& g, const Tensor& col) const override {
    const int64_t image = g.cin * g.h * g.w, cols = g.K() * g.L();
    PSYNC_DISPATCH_FLOAT_TYPES(col.dtype(), "Im2Col", [&] {
      for (int64_t n = 0; n < x.size(0); ++n) Im2ColImage(In<scalar_t>(x) + n * image, g, Out<scalar_t>(col) + n * cols);
    });
  }

  void Col2Im(const Tensor& col, const Conv2dGeometry& g, const Tensor& dx) const override {
    const int64_t image = g.cin * g.h * g.w, cols = g.K() * g.L();
    PSYNC_DISPATCH_FLOAT_TYPES(dx.dtype(), "Col2Im", [&] {
      for (int64_t n = 0; n < dx.size(0); ++n) Col2ImImage(In<scalar_t>(col) + n * cols, g, Out<scalar_t>(dx) + n * image);
    });
  }

  void AddChannelBias(const Tensor& y, const Tensor& bias) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "AddChannelBias", [&] {
      AddChannelBiasRows(Out<scalar_t>(y), In<scalar_t>(bias), y.size(0), y.size(1), y.size(2));
    });
  }

  void ChannelSums(const Tensor& grad, const Tensor& dbias) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(dbias.dtype(), "ChannelSums", [&] {
      ChannelSumRows(In<scalar_t>(grad), grad.size(0), grad.size(1), grad.size(2), Out<scalar_t>(dbias));
    });
  }

  void AccumulateParts(const Tensor& parts, const Tensor& acc) const override {
    const int64_t n = parts.size(0), m = parts.numel() / n;
    PSYNC_DISPATCH_FLOAT_TYPES(parts.dtype(), "AccumulateParts",
                               [&] { AccumulatePartRows(In<scalar_t>(parts), n, m, Out<double>(acc)); });
  }

  void MaxPool2d(const Tensor& x, int64_t k, const Tensor& y, const Tensor& indices) const override {
    const int64_t planes = x.size(0), h = x.size(1), w = x.size(2), out = y.size(1) * y.size(2);
    PSYNC_DISPATCH_FLOAT_TYPES(y.dtype(), "MaxPool2d", [&] {
      for (int64_t p = 0; p < planes; ++p) {
        MaxPoolPlane(In<scalar_t>(x) + p * h * w, h, w, k, Out<scalar_t>(y) + p * out, Out<int64_t>(indices) + p * out);
      }
    });
  }

  void MaxPool2dBackward(const Tensor& grad, const Tensor& indices, int64_t k, const Tensor& dx) const override {
    const int64_t planes = dx.size(0), h = dx.size(1), w = dx.size(2), ho = grad.size(1), wo = grad.size(2);
    int64_t bad = -1;
    PSYNC_DISPATCH_FLOAT_TYPES(dx.dtype(), "MaxPool2dBackward", [&] {
      bad = MaxPoolBackwardPlanes(In<scalar_t>(grad), In<int64_t>(indices), planes, h, w, k, Out<scalar_t>(dx));
    });
    if (bad >= 0) {
      const int64_t p = bad / (ho * wo), oh = bad / wo % ho, ow = bad % wo;
      throw TensorError(absl::StrCat("MaxPool2dBackward: indices[plane ", p, ", ", oh, ", ", ow, "] = ",
                                     In<int64_t>(indices)[bad], " is not in its ", k, "x", k, " window (rows ", oh * k,
                                     "..", (oh + 1) * k - 1, ", columns ", ow * k, "..", (ow + 1) * k - 1, " of a ", h,
                                     "x", w, " plane)"));
    }
  }

};

}  // namespace

const NnKernels& CpuNnKernels() {
  static const CpuNn kernels;
  return kernels;
}

}  // namespace psync::ops
