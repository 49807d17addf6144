// Matmul, BatchedMatmul and the products with epilogues (Linear,
// LinearGelu, MatmulGeluBackward): shape checks, and the translation of
// (possibly strided) operands into BLAS terms, so that a transposed or
// sliced view is multiplied in place instead of being copied.
#include "psync/tensor/ops/blas.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/tensor/ops/blas_kernels.h"
#include "worker/tensor/ops/check.h"
#include "psync/tensor/ops/copy.h"
#include "psync/tensor/ops/nn.h"
#include "psync/tensor/ops/pointwise.h"

namespace psync::ops {

const BlasKernels& BlasKernelsFor(Device device) {
  return device.is_cpu() ? CpuBlasKernels() : CudaBlasKernels();
}

namespace {

// The last two dims of `t` as a BLAS operand (the caller's transpose flag
// included), when one of them has unit stride; false otherwise.
bool MatrixOperand(const Tensor& t, bool trans, GemmOperand* out) {
  const int64_t r = t.size(-2), c = t.size(-1);
  const int64_t rs = t.stride(-2), cs = t.stride(-1);
  if ((cs == 1 || c <= 1) && (r <= 1 || rs >= std::max<int64_t>(1, c))) {
    out->trans = trans;  // row-major as stored
    out->ld = r <= 1 ? std::max<int64_t>(1, c) : rs;
    return true;
  }
  if ((rs == 1 || r <= 1) && (c <= 1 || cs >= std::max<int64_t>(1, r))) {
    out->trans = !trans;  // stored column-major: the row-major transpose
    out->ld = c <= 1 ? std::max<int64_t>(1, r) : cs;
    return true;
  }
  return false;
}

// Fills `op` for `t`, replacing `t` with a contiguous copy when its last two
// dims cannot be given to BLAS directly. Batch dims keep their strides
// (the kernels walk them), so slices and permutations of a bigger tensor
// are multiplied in place.
void Operand(Tensor& t, bool trans, const std::vector<int64_t>& batch_dims, GemmOperand* op) {
  if (!MatrixOperand(t, trans, op)) {
    t = t.Contiguous();
    MatrixOperand(t, trans, op);
  }
  op->batch_strides.clear();
  for (int64_t d : batch_dims) op->batch_strides.push_back(t.stride(d));
  op->data = t.raw_data();
}

// What a product computes beyond op(a) @ op(b) (ops/blas.h), and where.
struct Spec {
  bool trans_a = false, trans_b = false, batched = false;
  Tensor out;                  // given destination, or undefined
  Epilogue epilogue = Epilogue::kNone;
  Tensor bias;                 // kBias, kBiasGelu (undefined: kBias becomes kNone)
  Tensor aux;                  // kDGelu: the forward's pre-activation; kBiasGelu: filled in here
};

Tensor Product(const char* op, Tensor a, Tensor b, Spec& spec) {
  const bool trans_a = spec.trans_a, trans_b = spec.trans_b;
  check::Args args = {{"a", &a}, {"b", &b}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOrBf16(op, args);
  if (!spec.batched) {
    check::Dim(op, args, {"a", &a}, 2);
    check::Dim(op, args, {"b", &b}, 2);
  } else {
    if (a.dim() < 2 || b.dim() != a.dim()) check::Fail(op, args, "expects a [..., m, k] and b [..., k, n] of equal rank >= 2");
    for (int64_t i = 0; i + 2 < a.dim(); ++i) {
      if (a.size(i) != b.size(i)) check::Fail(op, args, "batch dimensions differ");
    }
  }
  const int64_t m = trans_a ? a.size(-1) : a.size(-2);
  const int64_t k = trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = trans_b ? b.size(-1) : b.size(-2);
  const int64_t n = trans_b ? b.size(-2) : b.size(-1);
  if (k != kb) check::Fail(op, args, absl::StrCat("inner dimensions differ (", k, " vs ", kb, ")"));
  Shape out_shape(a.shape().begin(), a.shape().end() - 2);
  out_shape.push_back(m);
  out_shape.push_back(n);

  Tensor c;
  if (spec.out.defined()) {
    const Tensor& out = spec.out;
    const bool dtype_ok = out.dtype() == dt || (dt == kBFloat16 && out.dtype() == kFloat32);
    if (out.device() != d || !dtype_ok || out.shape() != out_shape || !out.is_contiguous()) {
      check::Fail(op, args, absl::StrCat("output must be a contiguous ", ShapeToString(out_shape), " ", DTypeName(dt),
                                         dt == kBFloat16 ? " (or float32)" : "", " tensor on ", d.ToString(), ", got ",
                                         check::Describe(out)));
    }
    c = out;
  } else {
    c = Tensor::Empty(out_shape, dt, d);
  }
  if (spec.epilogue == Epilogue::kBias && !spec.bias.defined()) spec.epilogue = Epilogue::kNone;
  if (spec.bias.defined()) {
    const Tensor& bias = spec.bias;
    if (bias.device() != d || bias.dtype() != MathDType(c.dtype()) || bias.shape() != Shape{n}) {
      check::Fail(op, args, absl::StrCat("bias must be a [", n, "] ", DTypeName(MathDType(c.dtype())), " tensor on ",
                                         d.ToString(), ", got ", check::Describe(bias)));
    }
    spec.bias = bias.Contiguous();
  }
  if (spec.epilogue == Epilogue::kDGelu) {
    const Tensor& aux = spec.aux;
    if (!aux.defined() || aux.device() != d || aux.dtype() != c.dtype() || aux.shape() != out_shape) {
      check::Fail(op, args, absl::StrCat("pre must be a ", ShapeToString(out_shape), " ", DTypeName(c.dtype()),
                                         " tensor on ", d.ToString(), ", got ", check::Describe(aux)));
    }
    spec.aux = aux.Contiguous();
  } else if (spec.epilogue == Epilogue::kBiasGelu) {
    spec.aux = Tensor::Empty(out_shape, c.dtype(), d);
  }
  if (c.numel() == 0) return c;
  if (k == 0) {  // empty inner dimension: the product is all zeros (then the epilogue)
    if (spec.epilogue == Epilogue::kNone || spec.epilogue == Epilogue::kDGelu) {
      Fill(c, 0.0);
      return c;
    }
    Tensor z = Tensor::Zeros(out_shape, c.dtype(), d);
    Tensor pre = AddBias(z, spec.bias.To(c.dtype()));
    if (spec.epilogue == Epilogue::kBiasGelu) {
      Copy(spec.aux, pre);
      Copy(c, Gelu(pre));
    } else {
      Copy(c, pre);
    }
    return c;
  }
  GemmArgs g;
  g.dtype = dt;
  g.device = d.index;
  g.allow_tf32 = AllowTf32();
  std::vector<int64_t> batch_dims;  // size-1 batch dims say nothing
  for (int64_t i = 0; i + 2 < a.dim(); ++i) {
    if (a.size(i) == 1) continue;
    batch_dims.push_back(i);
    g.batch_shape.push_back(a.size(i));
  }
  g.m = m;
  g.n = n;
  g.k = k;
  Operand(a, trans_a, batch_dims, &g.a);  // a and b stay alive (maybe as copies) until the kernel returns
  Operand(b, trans_b, batch_dims, &g.b);
  g.c = c;
  g.epilogue = spec.epilogue;
  g.bias = spec.bias;
  g.aux = spec.aux;
  BlasKernelsFor(d).Gemm(g);
  return c;
}

const char* MatmulName(bool ta, bool tb) {
  return ta ? (tb ? "Matmul(a^T, b^T)" : "Matmul(a^T, b)") : (tb ? "Matmul(a, b^T)" : "Matmul(a, b)");
}

std::atomic<bool> g_allow_tf32{false};

}  // namespace

void SetAllowTf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool AllowTf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  Spec s{trans_a, trans_b};
  return Product(MatmulName(trans_a, trans_b), a, b, s);
}

Tensor MatmulInto(Tensor out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  Spec s{trans_a, trans_b};
  s.out = std::move(out);
  return Product(MatmulName(trans_a, trans_b), a, b, s);
}

Tensor BatchedMatmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  Spec s{trans_a, trans_b, /*batched=*/true};
  return Product("BatchedMatmul", a, b, s);
}

Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Spec s{false, true};
  s.epilogue = Epilogue::kBias;
  s.bias = bias;
  return Product("Linear(x, w^T) + bias", x, w, s);
}

LinearGeluResult LinearGelu(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Spec s{false, true};
  s.epilogue = Epilogue::kBiasGelu;
  s.bias = bias.defined() ? bias : Tensor::Zeros({w.dim() == 2 ? w.size(0) : 0}, MathDType(x.dtype()), x.device());
  Tensor y = Product("LinearGelu(x, w^T) + bias", x, w, s);
  return {std::move(y), std::move(s.aux)};
}

Tensor MatmulGeluBackward(const Tensor& a, const Tensor& b, const Tensor& pre, bool trans_a, bool trans_b) {
  Spec s{trans_a, trans_b};
  s.epilogue = Epilogue::kDGelu;
  s.aux = pre;
  return Product("MatmulGeluBackward", a, b, s);
}

}  // namespace psync::ops
