#include "psync/nn/precision.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "psync/tensor/ops.h"

namespace psync::nn {

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "fp32" || n == "float32") return Precision::kFp32;
  if (n == "tf32") return Precision::kTf32;
  if (n == "bf16" || n == "bfloat16") return Precision::kBf16;
  return absl::InvalidArgumentError(absl::StrCat("--precision=", name, ": expected fp32, tf32 or bf16"));
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
  }
  return "unknown";
}

const PrecisionPolicy& PrecisionPolicy::Fp32() {
  static const PrecisionPolicy* fp32 = new PrecisionPolicy();
  return *fp32;
}

absl::StatusOr<std::shared_ptr<PrecisionPolicy>> PrecisionPolicy::Create(
    Precision precision, const std::vector<std::pair<std::string, autograd::Variable>>& matmul_weights) {
  std::shared_ptr<PrecisionPolicy> p(new PrecisionPolicy());
  p->precision_ = precision;
  ops::SetAllowTf32(precision == Precision::kTf32);
  if (precision != Precision::kBf16) return p;
  if (matmul_weights.empty()) {
    return absl::InvalidArgumentError("--precision=bf16: this model does not implement bf16 (it names no matmul weights)");
  }
  int64_t total = 0;
  const Device device = matmul_weights.front().second.data().device();
  for (const auto& [name, w] : matmul_weights) {
    if (w.data().dtype() != kFloat32 || w.data().device() != device) {
      return absl::InvalidArgumentError(absl::StrCat("--precision=bf16: weight ", name, " is ",
                                                     w.data().DebugString(), "; bf16 needs float32 masters on ",
                                                     device.ToString()));
    }
    total += w.data().numel();
  }
  p->flat_ = Tensor::Empty({total}, kBFloat16, device);
  int64_t offset = 0;
  for (const auto& [name, w] : matmul_weights) {
    Tensor copy = p->flat_.View(offset, w.data().shape());
    offset += w.data().numel();
    p->copies_.emplace(w.state().get(), std::make_pair(w, std::move(copy)));
  }
  p->RefreshCopies();
  return p;
}

const Tensor& PrecisionPolicy::MatmulWeight(const autograd::Variable& weight) const {
  auto it = copies_.find(weight.state().get());
  return it == copies_.end() ? weight.data() : it->second.second;
}

std::vector<Tensor> PrecisionPolicy::CopiesFor(
    const std::vector<std::pair<std::string, autograd::Variable>>& params) const {
  std::vector<Tensor> out;
  out.reserve(params.size());
  for (const auto& [name, v] : params) {
    auto it = copies_.find(v.state().get());
    out.push_back(it == copies_.end() ? Tensor() : it->second.second);
  }
  return out;
}

void PrecisionPolicy::RefreshCopiesOf(const std::vector<autograd::Variable>& weights) const {
  for (const autograd::Variable& w : weights) {
    auto it = copies_.find(w.state().get());
    if (it == copies_.end()) continue;
    Tensor copy = it->second.second;
    ops::Copy(copy, w.data());  // rounds to nearest even, as the optimizer's store
  }
}

void PrecisionPolicy::RefreshCopies() const {
  for (const auto& [state, entry] : copies_) {
    Tensor copy = entry.second;
    ops::Copy(copy, entry.first.data());  // rounds to nearest even, as the optimizer's store
  }
}

}  // namespace psync::nn
