#include "worker/checkpoint/format.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace psync::checkpoint {
namespace {
constexpr absl::string_view kPrefix = "ckpt-";
constexpr absl::string_view kSuffix = ".safetensors";
constexpr absl::string_view kTempInfix = ".tmp.";
}  // namespace

std::string CheckpointFileName(int64_t step) { return absl::StrFormat("ckpt-%08d.safetensors", step); }

std::string PathInDir(const std::string& dir, absl::string_view name) {
  return !dir.empty() && dir.back() == '/' ? absl::StrCat(dir, name) : absl::StrCat(dir, "/", name);
}

std::string CheckpointPath(const std::string& dir, int64_t step) { return PathInDir(dir, CheckpointFileName(step)); }

std::optional<int64_t> ParseCheckpointFileName(absl::string_view name) {
  if (!absl::StartsWith(name, kPrefix) || !absl::EndsWith(name, kSuffix)) return std::nullopt;
  absl::string_view digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(digits, &step)) return std::nullopt;  // overflow
  // Only the canonical spelling, so every step has exactly one file name.
  if (CheckpointFileName(step) != name) return std::nullopt;
  return step;
}

std::optional<int64_t> ParseTempFileName(absl::string_view name) {
  const size_t infix = name.rfind(kTempInfix);
  if (infix == absl::string_view::npos || infix + kTempInfix.size() == name.size()) return std::nullopt;
  return ParseCheckpointFileName(name.substr(0, infix));
}

}  // namespace psync::checkpoint
