// CUDA kernels of the copy, elementwise and reduction families.
//
// Determinism: reductions never use atomics. SumRows sums chunks of rows per
// column, then the chunks, in the order reduce_kernels.h fixes for every
// device (double accumulators), and the full Sum is a single fixed-shape
// block tree, so results are bitwise reproducible run to run.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cuda/launch.cuh"
#include "worker/tensor/ops/copy_kernels.h"
#include "worker/tensor/ops/pointwise_kernels.h"
#include "worker/tensor/ops/reduce_kernels.h"

namespace psync::ops {
namespace {

using cuda::BlocksFor;
using cuda::kThreads;
using cuda::In;
using cuda::Launch;
using cuda::Out;

constexpr int kReduceThreads = 1024;
constexpr int kMaxDims = 8;

// ---------------------------------------------------------------- copy

// Element conversion through double (16-bit types through float, as on the host).
template <typename T> __device__ double Widen(T v) { return static_cast<double>(v); }
template <> __device__ double Widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ double Widen<__half>(__half v) { return __half2float(v); }
template <typename T> __device__ T Narrow(double v) { return static_cast<T>(v); }
template <> __device__ __nv_bfloat16 Narrow<__nv_bfloat16>(double v) { return __float2bfloat16_rn(static_cast<float>(v)); }
template <> __device__ __half Narrow<__half>(double v) { return __float2half_rn(static_cast<float>(v)); }
template <typename To, typename From> __device__ To Convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else {
    return Narrow<To>(Widen(v));
  }
}

// Device types of the dtypes (same bit layouts as the host's BFloat16/Float16).
#define PSYNC_CUDA_DISPATCH_ALL(dtype, op, ...)                                              \
  [&] {                                                                                      \
    switch (dtype) {                                                                         \
      case DType::kFloat32: { using scalar_t = float; return __VA_ARGS__(); }                \
      case DType::kFloat64: { using scalar_t = double; return __VA_ARGS__(); }               \
      case DType::kBFloat16: { using scalar_t = __nv_bfloat16; return __VA_ARGS__(); }       \
      case DType::kFloat16: { using scalar_t = __half; return __VA_ARGS__(); }               \
      case DType::kInt64: { using scalar_t = int64_t; return __VA_ARGS__(); }                \
    }                                                                                        \
    ThrowUnsupportedDType(op, dtype);                                                        \
  }()

struct Layout {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t dst[kMaxDims];
  int64_t src[kMaxDims];
};

template <typename T>
__global__ void FillKernel(T* y, int64_t n, T v) {
  PSYNC_GRID_STRIDE(i, n) y[i] = v;
}

template <typename To, typename From>
__global__ void CopyKernel(To* dst, const From* src, int64_t n, Layout L) {
  PSYNC_GRID_STRIDE(i, n) {
    int64_t rem = i, od = 0, os = 0;
    for (int d = L.ndim - 1; d >= 0; --d) {
      const int64_t idx = rem % L.sizes[d];
      rem /= L.sizes[d];
      od += idx * L.dst[d];
      os += idx * L.src[d];
    }
    dst[od] = Convert<To>(src[os]);
  }
}

// The two layouts with size-1 dims dropped and mutually contiguous dims merged.
Layout MergedLayout(const Tensor& dst, const Tensor& src) {
  Layout L;
  for (int64_t i = 0; i < dst.dim(); ++i) {
    const int64_t n = dst.size(i), sd = dst.stride(i), ss = src.stride(i);
    if (n == 1) continue;
    if (L.ndim > 0 && L.dst[L.ndim - 1] == sd * n && L.src[L.ndim - 1] == ss * n) {
      L.sizes[L.ndim - 1] *= n;
      L.dst[L.ndim - 1] = sd;
      L.src[L.ndim - 1] = ss;
      continue;
    }
    if (L.ndim == kMaxDims) {
      throw TensorError(absl::StrCat("Copy: strided layout of ", dst.DebugString(), " has more than ", kMaxDims,
                                     " non-mergeable dimensions"));
    }
    L.sizes[L.ndim] = n;
    L.dst[L.ndim] = sd;
    L.src[L.ndim] = ss;
    ++L.ndim;
  }
  return L;
}

class CudaCopy final : public CopyKernels {
 public:
  void Fill(const Tensor& dst, double value) const override {
    Launch l(dst.device().index);
    const int64_t n = dst.numel();
    PSYNC_CUDA_DISPATCH_ALL(dst.dtype(), "Fill", [&] {
      // Converted on the host exactly as the CPU kernel does.
      scalar_t v;
      if constexpr (std::is_same_v<scalar_t, __nv_bfloat16>) {
        const uint16_t bits = BFloat16::FromFloat(static_cast<float>(value));
        std::memcpy(&v, &bits, sizeof(v));
      } else if constexpr (std::is_same_v<scalar_t, __half>) {
        const uint16_t bits = Float16::FromFloat(static_cast<float>(value));
        std::memcpy(&v, &bits, sizeof(v));
      } else {
        v = static_cast<scalar_t>(value);
      }
      FillKernel<scalar_t><<<BlocksFor(n), kThreads, 0, l.stream>>>(static_cast<scalar_t*>(dst.raw_data()), n, v);
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }

  void Copy(const Tensor& dst, const Tensor& src) const override {
    Launch l(dst.device().index);
    if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
      PSYNC_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, l.stream));
      return;
    }
    const Layout layout = MergedLayout(dst, src);
    const int64_t n = dst.numel();
    PSYNC_CUDA_DISPATCH_ALL(dst.dtype(), "Copy", [&] {
      using To = scalar_t;
      PSYNC_CUDA_DISPATCH_ALL(src.dtype(), "Copy", [&] {
        CopyKernel<To, scalar_t><<<BlocksFor(n), kThreads, 0, l.stream>>>(
            static_cast<To*>(dst.raw_data()), static_cast<const scalar_t*>(src.raw_data()), n, layout);
      });
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
};

// ---------------------------------------------------------------- elementwise (float32, bfloat16)

using cuda::Load;
using cuda::Store;

// S: float or __nv_bfloat16 storage, float math (cuda/launch.cuh).
template <typename S>
__global__ void BinaryKernel(int op, const S* a, const S* b, S* y, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) {
    const float x = Load(a[i]), z = Load(b[i]);
    y[i] = Store<S>(op == 0 ? x + z : (op == 1 ? x - z : x * z));
  }
}
template <typename S>
__global__ void ScaleKernel(const S* x, S* y, int64_t n, float s) {
  PSYNC_GRID_STRIDE(i, n) y[i] = Store<S>(Load(x[i]) * s);
}
template <typename S>
__global__ void AxpyKernel(float alpha, const S* x, S* y, int64_t n) {
  // y + alpha*x with no fused multiply-add, to round like the CPU loop.
  PSYNC_GRID_STRIDE(i, n) y[i] = Store<S>(__fadd_rn(Load(y[i]), __fmul_rn(alpha, Load(x[i]))));
}
template <typename S>
__global__ void AddBiasKernel(const S* x, const S* bias, S* y, int64_t n, int64_t cols) {
  PSYNC_GRID_STRIDE(i, n) y[i] = Store<S>(Load(x[i]) + Load(bias[i % cols]));
}
template <typename S>
__global__ void ReluKernel(const S* x, S* y, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) {
    const float v = Load(x[i]);
    y[i] = Store<S>(v > 0.0f ? v : 0.0f);
  }
}
template <typename S>
__global__ void ReluBackwardKernel(const S* g, const S* out, S* y, int64_t n) {
  PSYNC_GRID_STRIDE(i, n) y[i] = Store<S>(Load(out[i]) > 0.0f ? Load(g[i]) : 0.0f);
}
template <typename S>
__global__ void FillFromScalarKernel(S* y, int64_t n, const S* s, float scale) {
  const S v = Store<S>(Load(s[0]) * scale);
  PSYNC_GRID_STRIDE(i, n) y[i] = v;
}

const float* F(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }
float* FW(const Tensor& t) { return static_cast<float*>(t.raw_data()); }

class CudaPointwise final : public PointwiseKernels {
 public:
  void Binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) const override {
    Launch l(y.device().index);
    const int64_t n = y.numel();
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(y.dtype(), "Binary", [&] {
      BinaryKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(static_cast<int>(op), In<scalar_t>(a), In<scalar_t>(b),
                                                            Out<scalar_t>(y), n);
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
  void Scale(const Tensor& x, double s, const Tensor& y) const override {
    Launch l(y.device().index);
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(y.dtype(), "Scale", [&] {
      ScaleKernel<<<BlocksFor(y.numel()), kThreads, 0, l.stream>>>(In<scalar_t>(x), Out<scalar_t>(y), y.numel(),
                                                                   static_cast<float>(s));
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
  void Axpy(double alpha, const Tensor& x, const Tensor& y) const override {
    Launch l(y.device().index);
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(y.dtype(), "Axpy", [&] {
      AxpyKernel<<<BlocksFor(y.numel()), kThreads, 0, l.stream>>>(static_cast<float>(alpha), In<scalar_t>(x),
                                                                  Out<scalar_t>(y), y.numel());
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
  void AddBias(const Tensor& x, const Tensor& bias, const Tensor& y) const override {
    Launch l(y.device().index);
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(y.dtype(), "AddBias", [&] {
      AddBiasKernel<<<BlocksFor(y.numel()), kThreads, 0, l.stream>>>(In<scalar_t>(x), In<scalar_t>(bias),
                                                                     Out<scalar_t>(y), y.numel(), bias.numel());
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
  void Relu(const Tensor& x, const Tensor& y) const override {
    Launch l(y.device().index);
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(y.dtype(), "Relu", [&] {
      ReluKernel<<<BlocksFor(y.numel()), kThreads, 0, l.stream>>>(In<scalar_t>(x), Out<scalar_t>(y), y.numel());
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
  void ReluBackward(const Tensor& grad, const Tensor& out, const Tensor& y) const override {
    Launch l(y.device().index);
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(y.dtype(), "ReluBackward", [&] {
      ReluBackwardKernel<<<BlocksFor(y.numel()), kThreads, 0, l.stream>>>(In<scalar_t>(grad), In<scalar_t>(out),
                                                                          Out<scalar_t>(y), y.numel());
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
  void FillFromScalar(const Tensor& scalar, double scale, const Tensor& y) const override {
    Launch l(y.device().index);
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(y.dtype(), "Expand", [&] {
      FillFromScalarKernel<<<BlocksFor(y.numel()), kThreads, 0, l.stream>>>(Out<scalar_t>(y), y.numel(),
                                                                            In<scalar_t>(scalar),
                                                                            static_cast<float>(scale));
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
};

// ---------------------------------------------------------------- reductions (of float32 or bfloat16, in double)

// One block of kReduceThreads: each thread sums a fixed strided subset in
// double, then a fixed shared-memory tree. y[0] = total / divisor.
template <typename S>
__global__ void ReduceSumKernel(const S* x, int64_t n, double divisor, float* y) {
  __shared__ double partial[kReduceThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kReduceThreads) acc += static_cast<double>(Load(x[i]));
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kReduceThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = static_cast<float>(partial[0] / divisor);
}

// SumRows in the order of reduce_kernels.h. Stage 1: thread (chunk, j) sums
// column j over the chunk's rows in order; adjacent threads read adjacent
// columns, so loads coalesce.
// Columns on grid x, chunks on grid y (striding past its 65,535 limit).
template <typename S>
__global__ void SumRowsChunksKernel(const S* x, double* part, int64_t rows, int64_t chunks, int64_t cols) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t r0 = chunk * kSumRowsChunk, r1 = min(rows, r0 + kSumRowsChunk);
    double acc = 0.0;
    for (int64_t i = r0; i < r1; ++i) acc = __dadd_rn(acc, static_cast<double>(Load(x[i * cols + j])));
    part[chunk * cols + j] = acc;
  }
}

// Stage 2: column j's chunk sums in chunk order.
__global__ void SumRowsTotalKernel(const double* part, int64_t chunks, int64_t cols, float* y) {
  PSYNC_GRID_STRIDE(j, cols) {
    double acc = 0.0;
    for (int64_t k = 0; k < chunks; ++k) acc = __dadd_rn(acc, part[k * cols + j]);
    y[j] = static_cast<float>(acc);
  }
}

// Stage 1 of SumOfSquares (order in reduce_kernels.h): one thread per lane,
// then each block's tree; block sums go to partial[blockIdx.x].
template <typename S>
__global__ void SquaresLanesKernel(const S* __restrict__ x, int64_t n, double* __restrict__ partial) {
  __shared__ double tree[kSquaresBlockLanes];
  double acc = 0.0;
  // Unrolled so several loads are in flight; the adds stay in order.
#pragma unroll 8
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kSquaresBlockLanes + threadIdx.x; i < n; i += kSquaresLanes) {
    const double v = static_cast<double>(Load(x[i]));
    acc = __dadd_rn(acc, __dmul_rn(v, v));
  }
  tree[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kSquaresBlockLanes / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) tree[threadIdx.x] += tree[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = tree[0];
}

// Stage 2: the block sums' tree, one block of kSquaresBlocks threads.
__global__ void SquaresBlocksKernel(const double* __restrict__ partial, double* __restrict__ out) {
  __shared__ double tree[kSquaresBlocks];
  tree[threadIdx.x] = partial[threadIdx.x];
  __syncthreads();
  for (int s = kSquaresBlocks / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) tree[threadIdx.x] += tree[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = tree[0];
}

class CudaReduce final : public ReduceKernels {
 public:
  void Sum(const Tensor& x, double divisor, const Tensor& y) const override {
    Launch l(y.device().index);
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(x.dtype(), "Sum", [&] {
      ReduceSumKernel<<<1, kReduceThreads, 0, l.stream>>>(In<scalar_t>(x), x.numel(), divisor, FW(y));
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
  void SumRows(const Tensor& x, const Tensor& y) const override {
    Launch l(y.device().index);
    const int64_t cols = y.numel(), rows = x.numel() / cols;
    const int64_t chunks = std::max<int64_t>(1, (rows + kSumRowsChunk - 1) / kSumRowsChunk);
    // Stream-ordered scratch: freed after the second kernel is queued.
    Tensor part = Tensor::Empty({chunks, cols}, kFloat64, y.device());
    double* pp = static_cast<double*>(part.raw_data());
    const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                    static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(x.dtype(), "SumRows", [&] {
      SumRowsChunksKernel<<<grid, kThreads, 0, l.stream>>>(In<scalar_t>(x), pp, rows, chunks, cols);
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
    SumRowsTotalKernel<<<BlocksFor(cols), kThreads, 0, l.stream>>>(pp, chunks, cols, FW(y));
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
  void SumOfSquares(const Tensor& x, const Tensor& out) const override {
    Launch l(out.device().index);
    // Stream-ordered scratch: freed after the second kernel is queued.
    Tensor partial = Tensor::Empty({kSquaresBlocks}, kFloat64, out.device());
    double* pp = static_cast<double*>(partial.raw_data());
    PSYNC_CUDA_DISPATCH_FLOAT_AND_BF16(x.dtype(), "SumOfSquares", [&] {
      SquaresLanesKernel<<<kSquaresBlocks, kSquaresBlockLanes, 0, l.stream>>>(In<scalar_t>(x), x.numel(), pp);
    });
    PSYNC_CUDA_CHECK(cudaGetLastError());
    SquaresBlocksKernel<<<1, kSquaresBlocks, 0, l.stream>>>(pp, static_cast<double*>(out.raw_data()));
    PSYNC_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace

const CopyKernels& CudaCopyKernels() {
  static const CudaCopy kernels;
  return kernels;
}
const PointwiseKernels& CudaPointwiseKernels() {
  static const CudaPointwise kernels;
  return kernels;
}
const ReduceKernels& CudaReduceKernels() {
  static const CudaReduce kernels;
  return kernels;
}

}  // namespace psync::ops
