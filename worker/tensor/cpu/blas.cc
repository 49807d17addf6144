// CPU matrix products: OpenBLAS sgemm/dgemm for float32/float64, one call
// per batch entry (its threading is left to OPENBLAS_NUM_THREADS); bfloat16
// through oneDNN (cpu/onednn_gemm.h). Epilogues that the library does not
// fuse run after the product with the pointwise and nn kernels, so a
// float32 Linear or MLP keeps the bits of its unfused ops.
#include <cblas.h>

#include <climits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cpu/onednn_gemm.h"
#include "worker/tensor/ops/blas_kernels.h"
#include "worker/tensor/ops/nn_kernels.h"
#include "worker/tensor/ops/pointwise_kernels.h"

namespace psync::ops {
namespace {

int BlasInt(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw TensorError(absl::StrCat("Matmul: ", what, "=", v, " does not fit the BLAS int"));
  }
  return static_cast<int>(v);
}

// c = op(a) @ op(b) in float32/float64 with OpenBLAS.
void OpenBlasGemm(const GemmArgs& g) {
  const int M = BlasInt(g.m, "m"), N = BlasInt(g.n, "n"), K = BlasInt(g.k, "k");
  const int lda = BlasInt(g.a.ld, "lda"), ldb = BlasInt(g.b.ld, "ldb");
  const CBLAS_TRANSPOSE ta = g.a.trans ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = g.b.trans ? CblasTrans : CblasNoTrans;
  if ((g.dtype != kFloat32 && g.dtype != kFloat64) || g.c.dtype() != g.dtype) {
    ThrowUnsupportedDType("Matmul", g.dtype);
  }
  // Walk the batch index (i0, i1, ...) in row-major order, keeping each
  // operand's element offset up to date.
  const size_t nd = g.batch_shape.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t off_a = 0, off_b = 0;
  void* c = g.c.raw_data();
  for (int64_t i = 0, batch = g.batch(); i < batch; ++i) {
    if (g.dtype == kFloat32) {
      cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, static_cast<const float*>(g.a.data) + off_a, lda,
                  static_cast<const float*>(g.b.data) + off_b, ldb, 0.0f, static_cast<float*>(c) + i * g.m * g.n, N);
    } else {
      cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, static_cast<const double*>(g.a.data) + off_a, lda,
                  static_cast<const double*>(g.b.data) + off_b, ldb, 0.0, static_cast<double*>(c) + i * g.m * g.n, N);
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

// The product alone (epilogue kNone, or kBias where oneDNN adds the bias
// before rounding) into `c`.
void Product(const GemmArgs& g, const Tensor& c, bool with_bias) {
  GemmArgs p = g;
  p.c = c;
  p.epilogue = with_bias ? Epilogue::kBias : Epilogue::kNone;
  if (g.dtype == kBFloat16) {
    cpu::OneDnnGemm(p);
  } else {
    OpenBlasGemm(p);
  }
}

class CpuBlas final : public BlasKernels {
 public:
  void Gemm(const GemmArgs& g) const override {
    const bool fused_bias = g.dtype == kBFloat16;  // oneDNN adds it in float32 before rounding
    const PointwiseKernels& pw = CpuPointwiseKernels();
    const NnKernels& nn = CpuNnKernels();
    switch (g.epilogue) {
      case Epilogue::kNone:
        Product(g, g.c, false);
        return;
      case Epilogue::kBias:
        Product(g, g.c, fused_bias);
        if (!fused_bias) pw.AddBias(g.c, g.bias, g.c);
        return;
      case Epilogue::kBiasGelu:
        Product(g, g.aux, fused_bias);
        if (!fused_bias) pw.AddBias(g.aux, g.bias, g.aux);
        nn.Gelu(g.aux, g.c);
        return;
      case Epilogue::kDGelu:
        if (g.c.dtype() == kBFloat16) {
          // The product in float32, multiplied by gelu'(aux) and rounded once.
          const Tensor p = Tensor::Empty(g.c.shape(), kFloat32);
          Product(g, p, false);
          nn.GeluBackward(p, g.aux, g.c);
        } else {
          Product(g, g.c, false);
          nn.GeluBackward(g.c, g.aux, g.c);
        }
        return;
    }
  }
};

}  // namespace

const BlasKernels& CpuBlasKernels() {
  static const CpuBlas kernels;
  return kernels;
}

}  // namespace psync::ops
