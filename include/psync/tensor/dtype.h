// DType: the element type of a tensor.
//
//   float32   the training dtype (every op, CPU and CUDA)
//   float64   CPU only: finite-difference gradient checks run the real ops in
//             double, and reductions accumulate in it
//   bfloat16  the activations and matmul inputs of a bf16 step (nn/precision.h):
//             stored in 16 bits, computed in float32 (MathType), by the ops
//             that say so; also a communication type (gradient compression)
//   float16   storage/communication type (gradient compression, casts)
//   int64     token ids, class labels, embedding indices
//
// Host code reads elements through data<T>() with T = float, double,
// BFloat16, Float16 or int64_t (DTypeOf<T> maps the C++ type to the DType).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "psync/tensor/half.h"

namespace psync {

enum class DType : uint8_t { kFloat32 = 0, kFloat64 = 1, kBFloat16 = 2, kFloat16 = 3, kInt64 = 4 };

inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kFloat64 = DType::kFloat64;
inline constexpr DType kBFloat16 = DType::kBFloat16;
inline constexpr DType kFloat16 = DType::kFloat16;
inline constexpr DType kInt64 = DType::kInt64;

// Bytes per element.
constexpr size_t ElementSize(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kInt64: return 8;
  }
  return 0;
}

// "float32", "float64", "bfloat16", "float16", "int64" (PyTorch's names).
const char* DTypeName(DType t);
// The inverse of DTypeName; also accepts "f32"/"fp32", "f64", "bf16", "fp16"/"half", "i64".
absl::StatusOr<DType> ParseDType(absl::string_view name);
// True for the four floating-point types.
constexpr bool IsFloating(DType t) { return t != DType::kInt64; }

template <typename T>
struct DTypeOf;  // no definition: only the types below are tensor elements
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };
template <> struct DTypeOf<Float16> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };

// The type a kernel computes in for elements stored as S: S itself for
// float and double, float for BFloat16 (every bf16 kernel loads to float,
// computes, and rounds once when it stores). CUDA's __nv_bfloat16 maps to
// float the same way (cuda/launch.cuh).
template <typename S>
struct MathTypeOf {
  using type = S;
};
template <>
struct MathTypeOf<BFloat16> {
  using type = float;
};
template <typename S>
using MathType = typename MathTypeOf<S>::type;

// The dtype MathType gives for `dtype` (float32 for bfloat16; else itself).
constexpr DType MathDType(DType t) { return t == DType::kBFloat16 ? DType::kFloat32 : t; }

}  // namespace psync

// One case of the dispatch macros below: binds scalar_t (storage) and
// math_t, then runs the kernel body.
#define PSYNC_DISPATCH_CASE_(enumerator, storage, math, ...) \
  case ::psync::DType::enumerator: {                         \
    using scalar_t = storage;                                \
    using math_t [[maybe_unused]] = math;                    \
    return __VA_ARGS__();                                    \
  }

// The one way a CPU kernel picks its element type. Runs `...` with
// `scalar_t` bound to the C++ type of `dtype` and `math_t` to the type it
// computes in (MathType<scalar_t>), for the floating types the CPU computes
// in (float32, float64); any other dtype throws TensorError naming `op`.
#define PSYNC_DISPATCH_FLOAT_TYPES(dtype, op, ...)                   \
  [&] {                                                              \
    switch (dtype) {                                                 \
      PSYNC_DISPATCH_CASE_(kFloat32, float, float, __VA_ARGS__)      \
      PSYNC_DISPATCH_CASE_(kFloat64, double, double, __VA_ARGS__)    \
      default:                                                       \
        ::psync::ThrowUnsupportedDType(op, dtype);                   \
    }                                                                \
  }()

// The same for kernels written over a storage type (dtype-generic: load
// with cpu::Load<math_t>, compute in math_t, store with cpu::Store<scalar_t>):
// float32, float64 and bfloat16 (scalar_t = BFloat16, math_t = float). For
// float and double the loads and stores are the identity, so such a kernel
// gives the float32 results of the plain loop bit for bit.
#define PSYNC_DISPATCH_FLOAT_TYPES_AND_BF16(dtype, op, ...)                   \
  [&] {                                                                       \
    switch (dtype) {                                                          \
      PSYNC_DISPATCH_CASE_(kFloat32, float, float, __VA_ARGS__)               \
      PSYNC_DISPATCH_CASE_(kFloat64, double, double, __VA_ARGS__)             \
      PSYNC_DISPATCH_CASE_(kBFloat16, ::psync::BFloat16, float, __VA_ARGS__)  \
      default:                                                                \
        ::psync::ThrowUnsupportedDType(op, dtype);                            \
    }                                                                         \
  }()

// Two storage types at once, for kernels whose operands mix a compute dtype
// and bfloat16 (a float32 residual in, a bfloat16 activation out): binds
// `a_t` to `dtype_a`'s type, `b_t` to `dtype_b`'s, and `math_t` to their
// common math type. The pairs: both float32 or bfloat16 in any mix
// (math_t = float), or both float64; any other pair throws naming `op`.
#define PSYNC_DISPATCH_FLOAT_PAIR_AND_BF16(dtype_a, dtype_b, op, ...)                           \
  [&] {                                                                                         \
    using ::psync::DType;                                                                       \
    const DType psync_da_ = (dtype_a), psync_db_ = (dtype_b);                                   \
    if (psync_da_ == DType::kFloat64 && psync_db_ == DType::kFloat64) {                         \
      using a_t = double;                                                                       \
      using b_t = double;                                                                       \
      using math_t [[maybe_unused]] = double;                                                   \
      return __VA_ARGS__();                                                                     \
    }                                                                                           \
    if ((psync_da_ != DType::kFloat32 && psync_da_ != DType::kBFloat16) ||                      \
        (psync_db_ != DType::kFloat32 && psync_db_ != DType::kBFloat16)) {                      \
      ::psync::ThrowUnsupportedDTypePair(op, psync_da_, psync_db_);                             \
    }                                                                                           \
    using math_t [[maybe_unused]] = float;                                                      \
    if (psync_da_ == DType::kFloat32) {                                                         \
      using a_t = float;                                                                        \
      if (psync_db_ == DType::kFloat32) {                                                       \
        using b_t = float;                                                                      \
        return __VA_ARGS__();                                                                   \
      }                                                                                         \
      using b_t = ::psync::BFloat16;                                                            \
      return __VA_ARGS__();                                                                     \
    }                                                                                           \
    using a_t = ::psync::BFloat16;                                                              \
    if (psync_db_ == DType::kFloat32) {                                                         \
      using b_t = float;                                                                        \
      return __VA_ARGS__();                                                                     \
    }                                                                                           \
    using b_t = ::psync::BFloat16;                                                              \
    return __VA_ARGS__();                                                                       \
  }()

// Same over every dtype.
#define PSYNC_DISPATCH_ALL_TYPES(dtype, op, ...)                                            \
  [&] {                                                                                     \
    switch (dtype) {                                                                        \
      case ::psync::DType::kFloat32: { using scalar_t = float; return __VA_ARGS__(); }      \
      case ::psync::DType::kFloat64: { using scalar_t = double; return __VA_ARGS__(); }     \
      case ::psync::DType::kBFloat16: { using scalar_t = ::psync::BFloat16; return __VA_ARGS__(); } \
      case ::psync::DType::kFloat16: { using scalar_t = ::psync::Float16; return __VA_ARGS__(); }   \
      case ::psync::DType::kInt64: { using scalar_t = int64_t; return __VA_ARGS__(); }      \
    }                                                                                       \
    ::psync::ThrowUnsupportedDType(op, dtype);                                              \
  }()

namespace psync {
// Throws TensorError("<op>: dtype <name> is not supported here").
[[noreturn]] void ThrowUnsupportedDType(const char* op, DType dtype);
// Throws TensorError("<op>: dtypes <a> and <b> cannot be mixed here").
[[noreturn]] void ThrowUnsupportedDTypePair(const char* op, DType a, DType b);
}  // namespace psync
