#include "psync/nn/state_dict.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/logging.h"
#include "psync/tensor/ops.h"

namespace psync::nn {

std::vector<std::pair<std::string, Tensor>> StateDict(const Module& module) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, var] : module.named_parameters()) out.emplace_back(name, var.data());
  return out;
}

absl::Status LoadStateDict(Module& module, const std::map<std::string, Tensor>& state) {
  const auto params = module.named_parameters();
  std::vector<std::string> problems;
  std::set<std::string> known;
  for (const auto& [name, var] : params) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      problems.push_back(absl::StrCat("missing parameter '", name, "'"));
    } else if (!it->second.defined()) {
      problems.push_back(absl::StrCat("parameter '", name, "' is an undefined tensor"));
    } else if (it->second.shape() != var.shape()) {
      problems.push_back(absl::StrCat("parameter '", name, "' has shape ", ShapeToString(it->second.shape()),
                                      " in the state dict but ", ShapeToString(var.shape()), " in the model"));
    }
  }
  for (const auto& [name, tensor] : state) {
    if (!known.count(name)) problems.push_back(absl::StrCat("unexpected parameter '", name, "'"));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("LoadStateDict: ", absl::StrJoin(problems, "; ")));
  }
  for (const auto& [name, var] : params) {
    try {
      ops::Copy(var.mutable_data(), state.at(name));
    } catch (const TensorError& e) {
      return absl::InvalidArgumentError(absl::StrCat("LoadStateDict: copying '", name, "': ", e.what()));
    }
  }
  return absl::OkStatus();
}

}  // namespace psync::nn
