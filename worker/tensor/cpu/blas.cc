// CPU matrix products: OpenBLAS sgemm/dgemm, one call per batch entry (its
// threading is left to OPENBLAS_NUM_THREADS).
#include <cblas.h>

#include <climits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/tensor/ops/blas_kernels.h"

namespace psync::ops {
namespace {

int BlasInt(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw TensorError(absl::StrCat("Matmul: ", what, "=", v, " does not fit the BLAS int"));
  }
  return static_cast<int>(v);
}

class CpuBlas final : public BlasKernels {
 public:
  void Gemm(const GemmArgs& g) const override {
    const int M = BlasInt(g.m, "m"), N = BlasInt(g.n, "n"), K = BlasInt(g.k, "k");
    const int lda = BlasInt(g.a.ld, "lda"), ldb = BlasInt(g.b.ld, "ldb");
    const CBLAS_TRANSPOSE ta = g.a.trans ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = g.b.trans ? CblasTrans : CblasNoTrans;
    if (g.dtype != kFloat32 && g.dtype != kFloat64) ThrowUnsupportedDType("Matmul", g.dtype);
    // Walk the batch index (i0, i1, ...) in row-major order, keeping each
    // operand's element offset up to date.
    const size_t nd = g.batch_shape.size();
    std::vector<int64_t> idx(nd, 0);
    int64_t off_a = 0, off_b = 0;
    for (int64_t i = 0, batch = g.batch(); i < batch; ++i) {
      if (g.dtype == kFloat32) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, static_cast<const float*>(g.a.data) + off_a, lda,
                    static_cast<const float*>(g.b.data) + off_b, ldb, 0.0f, static_cast<float*>(g.c) + i * g.m * g.n, N);
      } else {
        cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, static_cast<const double*>(g.a.data) + off_a, lda,
                    static_cast<const double*>(g.b.data) + off_b, ldb, 0.0, static_cast<double*>(g.c) + i * g.m * g.n, N);
      }
      for (size_t d = nd; d-- > 0;) {
        off_a += g.a.batch_strides[d];
        off_b += g.b.batch_strides[d];
        if (++idx[d] < g.batch_shape[d]) break;
        off_a -= g.a.batch_strides[d] * g.batch_shape[d];
        off_b -= g.b.batch_strides[d] * g.batch_shape[d];
        idx[d] = 0;
      }
    }
  }
};

}  // namespace

const BlasKernels& CpuBlasKernels() {
  static const CpuBlas kernels;
  return kernels;
}

}  // namespace psync::ops
