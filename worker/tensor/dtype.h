// DType: the element type of a tensor.
//
//   float32   the training dtype (every op, CPU and CUDA)
//   float64   CPU only: finite-difference gradient checks run the real ops in
//             double, and reductions accumulate in it
//   bfloat16, float16  storage/communication types (gradient compression,
//             casts); arithmetic on them goes through float32
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
#include "worker/tensor/half.h"

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

}  // namespace psync

// Runs `...` with `scalar_t` bound to the C++ type of `dtype`, for the
// floating types the CPU computes in (float32, float64); any other dtype
// throws TensorError naming `op`. Used by CPU kernels only.
#define PSYNC_DISPATCH_FLOAT_TYPES(dtype, op, ...)                                          \
  [&] {                                                                                     \
    switch (dtype) {                                                                        \
      case ::psync::DType::kFloat32: {                                                      \
        using scalar_t = float;                                                             \
        return __VA_ARGS__();                                                               \
      }                                                                                     \
      case ::psync::DType::kFloat64: {                                                      \
        using scalar_t = double;                                                            \
        return __VA_ARGS__();                                                               \
      }                                                                                     \
      default:                                                                              \
        ::psync::ThrowUnsupportedDType(op, dtype);                                          \
    }                                                                                       \
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
}  // namespace psync
