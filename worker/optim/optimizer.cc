#include "psync/optim/optimizer.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "psync/optim/clip.h"
#include "psync/tensor/ops.h"

namespace psync::optim {

namespace {
std::string Describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return absl::StrCat(ShapeToString(t.shape()), " ", DTypeName(t.dtype()));
}
}  // namespace

void Optimizer::ZeroGrad(bool set_to_none) {
  for (const auto& [name, p] : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      ops::Fill(p.grad(), 0.0);
    }
  }
}

absl::Status Optimizer::ValidateParams(const NamedParams& params) {
  std::set<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    const std::string which = absl::StrCat("parameter '", name, "' (index ", i, ")");
    if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("optimizer: parameter ", i, " has no name"));
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer: ", which, " is listed twice"));
    }
    if (!p.defined() || !p.data().defined()) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer: ", which, " is undefined"));
    }
    if (!p.requires_grad() || !p.is_leaf()) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer: ", which, " is not a leaf that requires grad"));
    }
    if (p.data().dtype() != kFloat32 && p.data().dtype() != kFloat64) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer: ", which, " is ", DTypeName(p.data().dtype()),
                                                     "; parameters must be float32 or float64"));
    }
    if (!p.data().is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer: ", which, " is not contiguous"));
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::SetWeightCopies(std::vector<Tensor> copies) {
  if (!copies.empty() && copies.size() != params_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": ", copies.size(), " weight copies for ", params_.size(),
                                                   " parameters"));
  }
  for (size_t i = 0; i < copies.size(); ++i) {
    const Tensor& c = copies[i];
    const Tensor& p = params_[i].second.data();
    if (c.defined() && (c.dtype() != kBFloat16 || c.shape() != p.shape() || !c.is_contiguous() ||
                        c.device() != p.device())) {
      return absl::InvalidArgumentError(absl::StrCat(name(), ": the weight copy of '", params_[i].first, "' is ",
                                                     c.DebugString(), "; it must be a contiguous bfloat16 ",
                                                     ShapeToString(p.shape()), " tensor on ", p.device().ToString()));
    }
  }
  copies_ = std::move(copies);
  return absl::OkStatus();
}

absl::Status Optimizer::ParamError(size_t i, const std::exception& e, bool internal) const {
  std::string msg = absl::StrCat(name(), " step on parameter '", params_[i].first, "' (index ", i, "): ", e.what());
  return internal ? absl::InternalError(msg) : absl::InvalidArgumentError(msg);
}

NamedTensors Optimizer::State() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& p = params_[i].first;
    out.emplace_back(absl::StrCat(p, ".step"), Tensor::FromVector(std::vector<int64_t>{steps_[i]}, {}));
    for (auto& [suffix, t] : StateBuffers(i)) out.emplace_back(absl::StrCat(p, ".", suffix), t);
  }
  return out;
}

absl::StatusOr<NamedTensors> Optimizer::CheckpointState(bool keep) {
  if (!keep) return NamedTensors();
  return State();
}

absl::Status Optimizer::LoadCheckpointState(const NamedTensors& state) { return LoadState(state); }

absl::StatusOr<double> Optimizer::ClipGradNorm(double max_norm) { return optim::ClipGradNorm(params_, max_norm); }

int64_t Optimizer::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    bytes += static_cast<int64_t>(sizeof(int64_t));  // the step count
    for (const auto& [suffix, t] : StateBuffers(i)) bytes += static_cast<int64_t>(t.nbytes());
  }
  return bytes;
}

absl::StatusOr<std::map<std::string, const Tensor*>> Optimizer::MatchState(const std::vector<StateEntry>& expected,
                                                                          const NamedTensors& state) const {
  std::map<std::string, const Tensor*> given;
  for (const auto& [key, t] : state) {
    if (!given.emplace(key, &t).second) {
      return absl::InvalidArgumentError(absl::StrCat(name(), " state: entry '", key, "' appears twice"));
    }
  }
  for (const StateEntry& want : expected) {
    auto it = given.find(want.key);
    if (it == given.end()) {
      return absl::InvalidArgumentError(absl::StrCat(name(), " state: entry '", want.key, "' is missing"));
    }
    const Tensor& got = *it->second;
    if (!got.defined() || got.shape() != want.shape || got.dtype() != want.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(name(), " state: entry '", want.key, "' is ", Describe(got),
                                                     ", expected ", ShapeToString(want.shape), " ",
                                                     DTypeName(want.dtype)));
    }
    if (want.dtype == kInt64 && got.To(Device::CPU()).Item<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name(), " state: entry '", want.key, "' is negative"));
    }
  }
  if (given.size() != expected.size()) {
    std::set<std::string> known;
    for (const StateEntry& e : expected) known.insert(e.key);
    for (const auto& [key, t] : given) {
      if (!known.count(key)) {
        return absl::InvalidArgumentError(
            absl::StrCat(name(), " state: unexpected entry '", key, "' (no such parameter or buffer)"));
      }
    }
  }
  return given;
}

absl::Status Optimizer::LoadState(const NamedTensors& state) {
  // Check everything before changing anything.
  std::vector<StateEntry> expected;
  for (const auto& [key, t] : State()) expected.push_back(StateEntry{key, t.shape(), t.dtype()});
  absl::StatusOr<std::map<std::string, const Tensor*>> matched = MatchState(expected, state);
  if (!matched.ok()) return matched.status();
  const std::map<std::string, const Tensor*>& given = *matched;
  try {
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& p = params_[i].first;
      steps_[i] = given.at(absl::StrCat(p, ".step"))->To(Device::CPU()).Item<int64_t>();
      for (auto& [suffix, t] : StateBuffers(i)) ops::Copy(t, *given.at(absl::StrCat(p, ".", suffix)));
    }
  } catch (const TensorError& e) {
    return absl::InternalError(absl::StrCat(name(), " state: copying into the optimizer failed: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace psync::optim
