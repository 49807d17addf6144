// Device helpers of the CUDA matrix products (cuda/blas.cc; internal to
// worker/tensor/cuda), in cuda/gemm_support.cu.
#pragma once

#ifdef PSYNC_WITH_CUDA

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/tensor/ops/blas_kernels.h"

namespace psync::cuda {

// The epilogue of a product p [rows, n] (float32, row-major), elementwise,
// when cuBLASLt has no fused kernel for it: kBias c = p + bias; kBiasGelu
// aux = p + bias, c = gelu(aux); kDGelu c = p * gelu'(aux). c and aux are
// float or bfloat16 (c_dtype; c may be p itself when float); bias float32 or
// null. Rounds once to c's dtype (aux: computed from the stored aux, as the
// CPU does).
void LaunchGemmEpilogue(ops::Epilogue epilogue, const float* p, DType c_dtype, void* c, const float* bias, void* aux,
                        int64_t total, int64_t n, cudaStream_t stream);

// For a batched product whose batch dims do not collapse into one stride
// (e.g. [B, H] heads of a fused qkv projection): fills ptrs[3 * batch]
// (device memory) with the addresses of every batch entry of a, b and c, in
// batch row-major order, so one cublasGemmBatchedEx call does them all.
struct BatchWalk {
  static constexpr int kMaxDims = 8;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t a_strides[kMaxDims] = {}, b_strides[kMaxDims] = {};  // elements
  int64_t c_matrix = 0;                                         // elements per c matrix
  int64_t a_elem = 0, b_elem = 0, c_elem = 0;                   // bytes per element
};
void LaunchBatchPointers(const BatchWalk& walk, int64_t batch, const void* a, const void* b, void* c, void** ptrs,
                         cudaStream_t stream);

}  // namespace psync::cuda

#endif  // PSYNC_WITH_CUDA
