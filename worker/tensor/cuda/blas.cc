// CUDA matrix products through cuBLAS (FP32 math, no TF32: the handle's
// math mode is set in cuda_context.cc).
#include <climits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cuda/cuda_context.h"
#include "worker/tensor/ops/blas_kernels.h"

namespace psync::ops {
namespace {

int CublasInt(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) throw TensorError(absl::StrCat("Matmul: ", what, "=", v, " does not fit cuBLAS int"));
  return static_cast<int>(v);
}

class CudaBlas final : public BlasKernels {
 public:
  void Gemm(const GemmArgs& g) const override {
    if (g.dtype != kFloat32) ThrowUnsupportedDType("Matmul on CUDA", g.dtype);
    const int device = g.device;
    cublasHandle_t handle = cuda::CublasHandle(device);
    cuda::DeviceGuard guard(device);
    // cuBLAS is column-major. A row-major [r,c] matrix is its column-major
    // transpose, so C^T[n,m] = op(B)^T op(A)^T is computed with B first.
    const int M = CublasInt(g.m, "m"), N = CublasInt(g.n, "n"), K = CublasInt(g.k, "k");
    const int lda = CublasInt(g.a.ld, "lda"), ldb = CublasInt(g.b.ld, "ldb");
    const cublasOperation_t ta = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const float alpha = 1.0f, beta = 0.0f;
    const float* a = static_cast<const float*>(g.a.data);
    const float* b = static_cast<const float*>(g.b.data);
    float* c = static_cast<float*>(g.c);
    if (g.batch_shape.empty()) {
      PSYNC_CUBLAS_CHECK(cublasSgemm(handle, tb, ta, N, M, K, &alpha, b, ldb, a, lda, &beta, c, N));
      return;
    }
    // The innermost batch dim goes to one strided-batched call; outer batch
    // dims (e.g. the batch of [B, H, T, hs] head views, whose strides do not
    // collapse with the heads') loop here.
    const size_t nd = g.batch_shape.size();
    const int64_t inner = g.batch_shape[nd - 1];
    const int64_t outer = g.batch() / inner;
    std::vector<int64_t> idx(nd - 1, 0);
    int64_t off_a = 0, off_b = 0;
    for (int64_t o = 0; o < outer; ++o) {
      PSYNC_CUBLAS_CHECK(cublasSgemmStridedBatched(
          handle, tb, ta, N, M, K, &alpha, b + off_b, ldb, g.b.batch_strides[nd - 1], a + off_a, lda,
          g.a.batch_strides[nd - 1], &beta, c + o * inner * g.m * g.n, N, g.m * g.n, CublasInt(inner, "batch")));
      for (size_t d = nd - 1; d-- > 0;) {
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

const BlasKernels& CudaBlasKernels() {
  static const CudaBlas kernels;
  return kernels;
}

}  // namespace psync::ops
