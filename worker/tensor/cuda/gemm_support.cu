#include "worker/tensor/cuda/gemm_support.h"

#include "worker/tensor/cuda/gelu.cuh"
#include "worker/tensor/cuda/launch.cuh"

namespace psync::cuda {
namespace {

template <typename S>
__global__ void EpilogueKernel(int mode, const float* p, S* c, const float* bias, S* aux, int64_t total, int64_t n) {
  PSYNC_GRID_STRIDE(i, total) {
    const float v = p[i];
    switch (mode) {
      case 0:  // kBias
        c[i] = Store<S>(__fadd_rn(v, bias[i % n]));
        break;
      case 1: {  // kBiasGelu, from the stored (rounded) aux
        const S pre = Store<S>(__fadd_rn(v, bias != nullptr ? bias[i % n] : 0.0f));
        aux[i] = pre;
        c[i] = Store<S>(GeluValue(Load(pre)));
        break;
      }
      default:  // kDGelu
        c[i] = Store<S>(v * GeluGrad(Load(aux[i])));
        break;
    }
  }
}

__global__ void BatchPointersKernel(BatchWalk w, int64_t batch, const char* a, const char* b, char* c, void** ptrs) {
  PSYNC_GRID_STRIDE(i, batch) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int d = w.ndim - 1; d >= 0; --d) {
      const int64_t idx = rem % w.shape[d];
      rem /= w.shape[d];
      oa += idx * w.a_strides[d];
      ob += idx * w.b_strides[d];
    }
    ptrs[i] = const_cast<char*>(a) + oa * w.a_elem;
    ptrs[batch + i] = const_cast<char*>(b) + ob * w.b_elem;
    ptrs[2 * batch + i] = c + i * w.c_matrix * w.c_elem;
  }
}

}  // namespace

void LaunchGemmEpilogue(ops::Epilogue epilogue, const float* p, DType c_dtype, void* c, const float* bias, void* aux,
                        int64_t total, int64_t n, cudaStream_t stream) {
  const int mode = epilogue == ops::Epilogue::kBias ? 0 : (epilogue == ops::Epilogue::kBiasGelu ? 1 : 2);
  PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(c_dtype, "Matmul epilogue", [&] {
    EpilogueKernel<<<BlocksFor(total), kThreads, 0, stream>>>(mode, p, static_cast<scalar_t*>(c), bias,
                                                              static_cast<scalar_t*>(aux), total, n);
  });
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void LaunchBatchPointers(const BatchWalk& walk, int64_t batch, const void* a, const void* b, void* c, void** ptrs,
                         cudaStream_t stream) {
  BatchPointersKernel<<<BlocksFor(batch), kThreads, 0, stream>>>(walk, batch, static_cast<const char*>(a),
                                                                 static_cast<const char*>(b), static_cast<char*>(c),
                                                                 ptrs);
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace psync::cuda
