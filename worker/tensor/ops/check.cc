#include "worker/tensor/ops/check.h"

#include "absl/strings/str_cat.h"

namespace psync::ops::check {

std::string Describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return absl::StrCat(ShapeToString(t.shape()), " ", DTypeName(t.dtype()), " ", t.device().ToString());
}

void Fail(const char* op, Args args, const std::string& why) {
  std::string s;
  for (const Arg& a : args) {
    if (!s.empty()) s += ", ";
    absl::StrAppend(&s, a.name, " ", Describe(*a.t));
  }
  throw TensorError(absl::StrCat(op, "(", s, "): ", why));
}

Device Defined(const char* op, Args args, bool same_device) {
  for (const Arg& a : args) {
    if (!a.t->defined()) Fail(op, args, absl::StrCat(a.name, " is undefined"));
  }
  const Device d = args.begin()->t->device();
  if (same_device) {
    for (const Arg& a : args) {
      if (a.t->device() != d) Fail(op, args, "inputs are on different devices");
    }
  }
  return d;
}

void Dim(const char* op, Args args, const Arg& a, int64_t dim) {
  if (a.t->dim() != dim) {
    Fail(op, args, absl::StrCat(a.name, " must have ", dim, " dimension(s), got ", a.t->dim()));
  }
}

void SameShape(const char* op, Args args) {
  const Shape& s = args.begin()->t->shape();
  for (const Arg& a : args) {
    if (a.t->shape() != s) Fail(op, args, "shapes differ");
  }
}

void SameNumel(const char* op, Args args) {
  const int64_t n = args.begin()->t->numel();
  for (const Arg& a : args) {
    if (a.t->numel() != n) Fail(op, args, "element counts differ");
  }
}

void SameDType(const char* op, Args args) {
  const DType d = args.begin()->t->dtype();
  for (const Arg& a : args) {
    if (a.t->dtype() != d) Fail(op, args, "dtypes differ");
  }
}

void DTypeIs(const char* op, Args args, const Arg& a, DType dtype) {
  if (a.t->dtype() != dtype) {
    Fail(op, args, absl::StrCat(a.name, " must be ", DTypeName(dtype), ", got ", DTypeName(a.t->dtype())));
  }
}

DType ComputeFloat(const char* op, Args args) {
  SameDType(op, args);
  const Tensor& first = *args.begin()->t;
  const DType d = first.dtype();
  if (d == kFloat32) return d;
  if (d == kFloat64 && first.device().is_cpu()) return d;
  if (d == kFloat64) Fail(op, args, "float64 is computed on the CPU only; use float32 on CUDA");
  Fail(op, args, absl::StrCat(DTypeName(d), " is a storage type here; convert to float32 (To(kFloat32)) to compute"));
}

DType FloatOrBf16(const char* op, Args args) {
  SameDType(op, args);
  return FloatOrBf16Operand(op, args, *args.begin());
}

DType FloatOrBf16Operand(const char* op, Args args, const Arg& a) {
  const DType dt = a.t->dtype();
  if (dt == kFloat32 || dt == kBFloat16 || (dt == kFloat64 && a.t->device().is_cpu())) return dt;
  if (dt == kFloat64) Fail(op, args, absl::StrCat(a.name, ": float64 is computed on the CPU only; use float32 on CUDA"));
  if (dt == kFloat16) {
    Fail(op, args, absl::StrCat(a.name, ": float16 is a storage type here; convert to float32 (To(kFloat32)) to compute"));
  }
  Fail(op, args, absl::StrCat(a.name, " must be float32, bfloat16 or float64, got ", DTypeName(dt)));
}

DType FloatOperand(const char* op, Args args, const Arg& a) {
  const DType dt = a.t->dtype();
  if (dt == kFloat32 || (dt == kFloat64 && a.t->device().is_cpu())) return dt;
  if (dt == kFloat64) Fail(op, args, absl::StrCat(a.name, ": float64 is computed on the CPU only; use float32 on CUDA"));
  Fail(op, args, absl::StrCat(a.name, " must be float32 or float64, got ", DTypeName(dt)));
}

void Contiguous(const char* op, Args args, const Arg& a) {
  if (!a.t->is_contiguous()) Fail(op, args, absl::StrCat(a.name, " must be contiguous"));
}

Tensor Destination(const char* op, Args args, const char* name, Tensor out, const Shape& shape, DType dtype,
                   Device device) {
  if (!out.defined()) return Tensor::Empty(shape, dtype, device);
  if (out.device() != device || out.dtype() != dtype || out.shape() != shape || !out.is_contiguous()) {
    Fail(op, args, absl::StrCat(name, " must be a contiguous ", ShapeToString(shape), " ", DTypeName(dtype),
                                " tensor on ", device.ToString(), ", got ", Describe(out)));
  }
  return out;
}

}  // namespace psync::ops::check
