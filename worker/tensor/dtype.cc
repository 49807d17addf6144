#include "psync/tensor/dtype.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "psync/tensor/tensor.h"

namespace psync {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "float32" || n == "f32" || n == "fp32" || n == "float") return kFloat32;
  if (n == "float64" || n == "f64" || n == "fp64" || n == "double") return kFloat64;
  if (n == "bfloat16" || n == "bf16") return kBFloat16;
  if (n == "float16" || n == "f16" || n == "fp16" || n == "half") return kFloat16;
  if (n == "int64" || n == "i64" || n == "long") return kInt64;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", std::string(name),
                                                 "' (expected float32, float64, bfloat16, float16 or int64)"));
}

void ThrowUnsupportedDType(const char* op, DType dtype) {
  throw TensorError(absl::StrCat(op, ": dtype ", DTypeName(dtype), " is not supported here"));
}

void ThrowUnsupportedDTypePair(const char* op, DType a, DType b) {
  throw TensorError(absl::StrCat(op, ": dtypes ", DTypeName(a), " and ", DTypeName(b), " cannot be mixed here"));
}

}  // namespace psync
