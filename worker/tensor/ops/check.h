// Argument checks shared by every op family. Internal to worker/tensor.
//
// Every op validates its arguments before dispatching to a device's kernels,
// and a failure throws TensorError naming the op and every operand with its
// shape, dtype and device:
//   "Add(a [2, 3] float32 cpu, b [3] float32 cpu): shapes differ"
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "psync/tensor/tensor.h"

namespace psync::ops::check {

struct Arg {
  const char* name;
  const Tensor* t;
};
using Args = std::initializer_list<Arg>;

// "[2, 3] float32 cpu", or "undefined".
std::string Describe(const Tensor& t);

[[noreturn]] void Fail(const char* op, Args args, const std::string& why);

// Every argument defined; with same_device, all on the first one's device.
// Returns that device.
Device Defined(const char* op, Args args, bool same_device = true);
void Dim(const char* op, Args args, const Arg& a, int64_t dim);
void SameShape(const char* op, Args args);
void SameNumel(const char* op, Args args);
// Every argument has the first one's dtype.
void SameDType(const char* op, Args args);
// Every argument has `dtype`.
void DTypeIs(const char* op, Args args, const Arg& a, DType dtype);
// The arguments share one floating dtype the device computes in: float32
// anywhere, float64 on the CPU. Returns it.
DType ComputeFloat(const char* op, Args args);
// The same for dtype-generic ops: float32 or bfloat16 anywhere, float64 on
// the CPU; the arguments share it. Returns it.
DType FloatOrBf16(const char* op, Args args);
// One operand `a` of such an op among others of other dtypes: float32 or
// bfloat16 anywhere, float64 on the CPU. Returns its dtype.
DType FloatOrBf16Operand(const char* op, Args args, const Arg& a);
// The floating dtype of one operand `a` (float32, or float64 on the CPU)
// among operands of other dtypes (int64 ids or indices). Returns it.
DType FloatOperand(const char* op, Args args, const Arg& a);
// Contiguous (for in-place ops on a destination).
void Contiguous(const char* op, Args args, const Arg& a);
// A caller-provided destination `out` (named `name`: a contiguous `shape`
// tensor of `dtype` on `device`, e.g. a DDP bucket slot), or a new tensor
// when `out` is undefined.
Tensor Destination(const char* op, Args args, const char* name, Tensor out, const Shape& shape, DType dtype,
                   Device device);

}  // namespace psync::ops::check
