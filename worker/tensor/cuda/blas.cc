// CUDA matrix products through cuBLASLt: float32 (FP32, or TF32 tensor
// cores when GemmArgs::allow_tf32) and bfloat16 operands (float32
// accumulation; the result in bfloat16 or float32), with the epilogues
// fused (BIAS, GELU_AUX_BIAS, DGELU); a batch whose dims collapse into one
// stride is one strided-batched call, any other batch one
// cublasGemmBatchedEx over device pointer arrays built by a kernel (no host
// loop). An epilogue cuBLASLt has no kernel for runs as our own kernel
// after the product (cuda/gemm_support.cu), as does every epilogue when
// PSYNC_CUBLASLT_EPILOGUES=0 (to compare the two on a GPU).
//
// Host work per call: a lookup of the call's cached matmul descriptor,
// layouts and algorithm (keyed by shapes, dtypes, strides, epilogue and
// pointer alignment; built once with cuBLASLt's heuristic), the pointer
// attributes, and the launch. Caches are per thread (descriptors are
// mutated per call); every launch goes on the device's compute stream.
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cuda/cuda_context.h"
#include "worker/tensor/cuda/gemm_support.h"
#include "worker/tensor/ops/blas_kernels.h"

namespace psync::ops {
namespace {

int CublasInt(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) throw TensorError(absl::StrCat("Matmul: ", what, "=", v, " does not fit cuBLAS int"));
  return static_cast<int>(v);
}

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case kFloat32: return CUDA_R_32F;
    case kBFloat16: return CUDA_R_16BF;
    default: ThrowUnsupportedDType("Matmul on CUDA", t);
  }
}

// The largest power of two (up to 256) dividing the address: cuBLASLt
// picks kernels by the alignment it is promised.
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align >>= 1;
  return align;
}

// The one batch stride of an operand whose batch dims collapse (size-1 dims
// are already gone), or -1.
int64_t CollapsedStride(const GemmOperand& op, const Shape& batch_shape) {
  if (batch_shape.empty()) return 0;
  for (size_t d = 0; d + 1 < batch_shape.size(); ++d) {
    if (op.batch_strides[d] != op.batch_strides[d + 1] * batch_shape[d + 1]) return -1;
  }
  return op.batch_strides.back();
}

bool FusedEpiloguesEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("PSYNC_CUBLASLT_EPILOGUES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

cublasLtEpilogue_t LtEpilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kBiasGelu: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// One planned cublasLtMatmul: descriptor, layouts, algorithm (or none).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;  // the heuristic found an algorithm
};

struct Shapes {
  int64_t batch;  // 1: no batch
  int64_t stride_a, stride_b;
};

// Plans c = epilogue(op(a) op(b)) for row-major operands. cuBLASLt is
// column-major: a row-major [r, c] matrix is its column-major transpose, so
// C^T [n, m] = op(B)^T op(A)^T is planned with our b as its A and our a as
// its B (as cuBLAS is called in cuda/blas.cc's history).
LtPlan* Plan(const GemmArgs& g, const Shapes& s, Epilogue epilogue, DType bias_dtype) {
  const cublasComputeType_t compute =
      g.dtype == kFloat32 && g.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const DType out = g.c.dtype();
  const std::string key =
      absl::StrCat(g.device, "|", static_cast<int>(g.dtype), static_cast<int>(out), static_cast<int>(compute), "|",
                   g.m, ",", g.n, ",", g.k, "|", g.a.trans, g.b.trans, g.a.ld, ",", g.b.ld, "|", s.batch, ",",
                   s.stride_a, ",", s.stride_b, "|", static_cast<int>(epilogue), static_cast<int>(bias_dtype), "|",
                   Alignment(g.a.data), ",", Alignment(g.b.data), ",", Alignment(g.c.raw_data()), ",",
                   g.aux.defined() ? Alignment(g.aux.raw_data()) : 0);
  thread_local std::unordered_map<std::string, LtPlan> plans;
  auto it = plans.find(key);
  if (it != plans.end()) return &it->second;
  LtPlan p;
  const cudaDataType_t in_t = CudaType(g.dtype), out_t = CudaType(out);
  PSYNC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F));
  const cublasOperation_t ta = g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;  // Lt's A is our b
  const cublasOperation_t tb = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;  // Lt's B is our a
  PSYNC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  PSYNC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cublasLtEpilogue_t ep = LtEpilogue(epilogue);
  PSYNC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
  if (epilogue == Epilogue::kBias || epilogue == Epilogue::kBiasGelu) {
    const cudaDataType_t bt = CudaType(bias_dtype);
    PSYNC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  if (epilogue == Epilogue::kBiasGelu || epilogue == Epilogue::kDGelu) {
    const int64_t aux_ld = g.n;  // aux is [m, n] row-major: column-major [n, m], ld n
    PSYNC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  // Stored (pre-op) column-major shapes: our b is [n, k] (N) or [k, n] (T).
  PSYNC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, in_t, g.b.trans ? g.k : g.n, g.b.trans ? g.n : g.k, g.b.ld));
  PSYNC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, in_t, g.a.trans ? g.m : g.k, g.a.trans ? g.k : g.m, g.a.ld));
  PSYNC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_t, g.n, g.m, g.n));
  if (s.batch > 1) {
    const int32_t count = CublasInt(s.batch, "batch");
    const int64_t sc = g.m * g.n;
    for (auto [layout, stride] : {std::pair{p.a, s.stride_b}, std::pair{p.b, s.stride_a}, std::pair{p.c, sc}}) {
      PSYNC_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      PSYNC_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                          &stride, sizeof(stride)));
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  PSYNC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = cuda::kLtWorkspaceBytes;
  PSYNC_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align_a = Alignment(g.b.data), align_b = Alignment(g.a.data), align_c = Alignment(g.c.raw_data());
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cuda::CublasLtHandle(g.device), p.desc, p.a, p.b, p.c,
                                                           p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.ok) p.algo = result.algo;
  return &plans.emplace(key, p).first->second;
}

// Runs a planned product; false when cuBLASLt had no algorithm for it.
bool RunLt(const GemmArgs& g, const Shapes& s, Epilogue epilogue, const Tensor& bias, cudaStream_t stream) {
  LtPlan* p = Plan(g, s, epilogue, bias.defined() ? bias.dtype() : g.c.dtype());
  if (!p->ok) return false;
  if (bias.defined()) {
    const void* bp = bias.raw_data();
    PSYNC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
  }
  if (epilogue == Epilogue::kBiasGelu || epilogue == Epilogue::kDGelu) {
    void* ap = g.aux.raw_data();
    PSYNC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap, sizeof(ap)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  void* c = g.c.raw_data();
  PSYNC_CUBLAS_CHECK(cublasLtMatmul(cuda::CublasLtHandle(g.device), p->desc, &alpha, g.b.data, p->a, g.a.data, p->b,
                                    &beta, c, p->c, c, p->c, &p->algo, cuda::CublasLtWorkspace(g.device),
                                    cuda::kLtWorkspaceBytes, stream));
  return true;
}

// Batch dims that do not collapse: pointer arrays built on the device, one
// cublasGemmBatchedEx. No epilogue (ops never ask for one here).
void PointerArrayGemm(const GemmArgs& g, cudaStream_t stream) {
  if (g.epilogue != Epilogue::kNone) throw TensorError("Matmul: an epilogue on a strided batch (internal error)");
  const int64_t batch = g.batch();
  cuda::BatchWalk w;
  if (g.batch_shape.size() > static_cast<size_t>(cuda::BatchWalk::kMaxDims)) {
    throw TensorError(absl::StrCat("BatchedMatmul: more than ", cuda::BatchWalk::kMaxDims, " batch dims"));
  }
  w.ndim = static_cast<int>(g.batch_shape.size());
  for (int d = 0; d < w.ndim; ++d) {
    w.shape[d] = g.batch_shape[d];
    w.a_strides[d] = g.a.batch_strides[d];
    w.b_strides[d] = g.b.batch_strides[d];
  }
  w.c_matrix = g.m * g.n;
  w.a_elem = w.b_elem = static_cast<int64_t>(ElementSize(g.dtype));
  w.c_elem = static_cast<int64_t>(ElementSize(g.c.dtype()));
  // Stream-ordered scratch, freed (in stream order) after the product.
  Tensor ptrs = Tensor::Empty({3 * batch}, kInt64, Device::CUDA(g.device));
  void** pp = static_cast<void**>(ptrs.raw_data());
  cuda::LaunchBatchPointers(w, batch, g.a.data, g.b.data, g.c.raw_data(), pp, stream);
  const cublasComputeType_t compute =
      g.dtype == kFloat32 && g.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float alpha = 1.0f, beta = 0.0f;
  const cublasOperation_t ta = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  PSYNC_CUBLAS_CHECK(cublasGemmBatchedEx(
      cuda::CublasHandle(g.device), tb, ta, CublasInt(g.n, "n"), CublasInt(g.m, "m"), CublasInt(g.k, "k"), &alpha,
      pp + batch, CudaType(g.dtype), CublasInt(g.b.ld, "ldb"), pp, CudaType(g.dtype), CublasInt(g.a.ld, "lda"), &beta,
      pp + 2 * batch, CudaType(g.c.dtype()), CublasInt(g.n, "n"), CublasInt(batch, "batch"), compute,
      CUBLAS_GEMM_DEFAULT));
}

class CudaBlas final : public BlasKernels {
 public:
  void Gemm(const GemmArgs& g) const override {
    if (g.dtype != kFloat32 && g.dtype != kBFloat16) ThrowUnsupportedDType("Matmul on CUDA", g.dtype);
    cuda::DeviceGuard guard(g.device);
    cudaStream_t stream = cuda::ComputeStream(g.device);
    Shapes s{g.batch_shape.empty() ? 1 : g.batch(), CollapsedStride(g.a, g.batch_shape),
             CollapsedStride(g.b, g.batch_shape)};
    if (s.stride_a < 0 || s.stride_b < 0) {
      PointerArrayGemm(g, stream);
      return;
    }
    // cuBLASLt wants the bias in the output's type (autocast's bf16 bias).
    Tensor bias = g.bias;
    if (bias.defined() && bias.dtype() != g.c.dtype()) bias = bias.To(g.c.dtype());
    const bool fused_ok = FusedEpiloguesEnabled() && (g.epilogue == Epilogue::kNone || g.batch_shape.empty()) &&
                          (g.aux.defined() ? g.n % 8 == 0 : true);
    if (fused_ok && RunLt(g, s, g.epilogue, bias, stream)) return;
    if (g.epilogue == Epilogue::kNone) {
      throw TensorError(absl::StrCat("Matmul: cuBLASLt found no algorithm for m=", g.m, " n=", g.n, " k=", g.k, " ",
                                     DTypeName(g.dtype), " -> ", DTypeName(g.c.dtype())));
    }
    // The product alone (into c when it is float32, else a float32
    // scratch), then the epilogue kernel.
    GemmArgs plain = g;
    plain.epilogue = Epilogue::kNone;
    plain.bias = plain.aux = Tensor();
    Tensor p = g.c.dtype() == kFloat32 ? g.c : Tensor::Empty(g.c.shape(), kFloat32, g.c.device());
    plain.c = p;
    if (!RunLt(plain, s, Epilogue::kNone, Tensor(), stream)) {
      throw TensorError(absl::StrCat("Matmul: cuBLASLt found no algorithm for m=", g.m, " n=", g.n, " k=", g.k));
    }
    cuda::LaunchGemmEpilogue(g.epilogue, static_cast<const float*>(p.raw_data()), g.c.dtype(), g.c.raw_data(),
                             g.bias.defined() ? static_cast<const float*>(g.bias.raw_data()) : nullptr,
                             g.aux.defined() ? g.aux.raw_data() : nullptr, g.c.numel(), g.n, stream);
  }
};

}  // namespace

const BlasKernels& CudaBlasKernels() {
  static const CudaBlas kernels;
  return kernels;
}

}  // namespace psync::ops
