#include "psync/tensor/ops/attention.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "worker/tensor/ops/attention_kernels.h"
#include "worker/tensor/ops/check.h"

namespace psync::ops {

const AttentionKernels& AttentionKernelsFor(Device device) {
  return device.is_cpu() ? CpuAttentionKernels() : CudaAttentionKernels();
}

namespace {

// One dtype for every operand: float32 or bfloat16 anywhere, float64 on the
// CPU. (The attention kernels compute bfloat16 in float32 themselves, unlike
// the ops that check::ComputeFloat admits.)
DType AttentionDType(const char* op, check::Args args) {
  check::SameDType(op, args);
  const Tensor& first = *args.begin()->t;
  const DType d = first.dtype();
  if (d == kFloat32 || d == kBFloat16) return d;
  if (d == kFloat64 && first.device().is_cpu()) return d;
  if (d == kFloat64) check::Fail(op, args, "float64 is computed on the CPU only; use float32 or bfloat16 on CUDA");
  check::Fail(op, args, absl::StrCat(DTypeName(d), " is not supported; use float32, bfloat16 or (CPU) float64"));
}

// Every named operand is [B, H, T, D] with q's shape.
void CheckHeads(const char* op, check::Args args, check::Args heads) {
  const Tensor& q = *heads.begin()->t;
  if (q.dim() != 4) check::Fail(op, args, absl::StrCat(heads.begin()->name, " must be [B, H, T, D]"));
  if (q.size(3) == 0) check::Fail(op, args, "the head size D (last dimension) must be at least 1");
  for (const check::Arg& a : heads) {
    if (a.t->shape() != q.shape()) {
      check::Fail(op, args, absl::StrCat(a.name, " must have ", heads.begin()->name, "'s shape [B, H, T, D]"));
    }
  }
}

void CheckScale(const char* op, check::Args args, double scale) {
  if (!std::isfinite(scale)) check::Fail(op, args, absl::StrCat("scale must be finite, got ", scale));
}

// t itself when its last stride is 1 (any other layout is read in place),
// else a contiguous copy.
Tensor UnitLast(const Tensor& t) { return t.stride(-1) == 1 || t.size(-1) <= 1 ? t : t.Contiguous(); }

// A [B, H, T, D] view of a new contiguous [B, T, H, D] tensor.
Tensor HeadsInterleaved(const Shape& bhtd, DType dt, Device d) {
  return Tensor::Empty({bhtd[0], bhtd[2], bhtd[1], bhtd[3]}, dt, d).Permute({0, 2, 1, 3});
}

DType LseDType(DType dt) { return dt == kFloat64 ? kFloat64 : kFloat32; }

}  // namespace

AttentionResult CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const char* op = "CausalAttention";
  check::Args args = {{"q", &q}, {"k", &k}, {"v", &v}};
  const Device d = check::Defined(op, args);
  const DType dt = AttentionDType(op, args);
  CheckHeads(op, args, args);
  CheckScale(op, args, scale);
  AttentionResult r;
  r.out = HeadsInterleaved(q.shape(), dt, d);
  r.lse = Tensor::Empty({q.size(0), q.size(1), q.size(2)}, LseDType(dt), d);
  if (r.out.numel() == 0) return r;
  AttentionKernelsFor(d).Forward(UnitLast(q), UnitLast(k), UnitLast(v), scale, r.out, r.lse);
  return r;
}

AttentionGrads CausalAttentionBackward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& out, const Tensor& lse, double scale, bool deterministic) {
  const char* op = "CausalAttentionBackward";
  check::Args args = {{"grad", &grad}, {"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}};
  const Device d = check::Defined(op, args);
  const DType dt = AttentionDType(op, {{"grad", &grad}, {"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}});
  CheckHeads(op, args, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"grad", &grad}});
  if (lse.dtype() != LseDType(dt)) {
    check::Fail(op, args, absl::StrCat("lse must be ", DTypeName(LseDType(dt)), " (CausalAttention's)"));
  }
  if (lse.shape() != Shape{q.size(0), q.size(1), q.size(2)}) check::Fail(op, args, "lse must be [B, H, T]");
  CheckScale(op, args, scale);
  AttentionGrads g;
  g.dq = HeadsInterleaved(q.shape(), dt, d);
  g.dk = HeadsInterleaved(q.shape(), dt, d);
  g.dv = HeadsInterleaved(q.shape(), dt, d);
  if (g.dq.numel() == 0) return g;
  AttentionKernelsFor(d).Backward(UnitLast(grad), UnitLast(q), UnitLast(k), UnitLast(v), UnitLast(out),
                                  lse.Contiguous(), scale, deterministic, g.dq, g.dk, g.dv);
  return g;
}

}  // namespace psync::ops
