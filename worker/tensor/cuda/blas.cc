// CUDA matrix products through cuBLAS (FP32 math, no TF32: the handle's
// math mode is set in cuda_context.cc).
#include <climits>

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
    if (g.batch == 1) {
      PSYNC_CUBLAS_CHECK(cublasSgemm(handle, tb, ta, N, M, K, &alpha, b, ldb, a, lda, &beta, c, N));
    } else {
      PSYNC_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, tb, ta, N, M, K, &alpha, b, ldb, g.b.batch_stride, a, lda,
                                                   g.a.batch_stride, &beta, c, N, g.m * g.n,
                                                   CublasInt(g.batch, "batch")));
    }
  }

};

}  // namespace

const BlasKernels& CudaBlasKernels() {
  static const CudaBlas kernels;
  return kernels;
}

}  // namespace psync::ops
