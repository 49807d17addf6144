#include "worker/runtime/init_weights.h"

#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/checkpoint/weights.h"
#include "psync/nn/state_dict.h"

namespace psync::runtime {

absl::StatusOr<NamedTensors> ReadInitialWeights(const std::string& path, const nn::Module& model,
                                                checkpoint::WeightsFormat format) {
  absl::StatusOr<checkpoint::ModelWeights> read = checkpoint::ReadModelWeights(path, format);
  if (!read.ok()) {
    return absl::Status(read.status().code(), absl::StrCat("--init: ", std::string(read.status().message())));
  }
  std::map<std::string, Tensor> by_name;
  for (auto& [name, t] : read->params) by_name[name] = t;
  const auto params = model.named_parameters();
  NamedTensors out;
  for (const auto& [name, p] : params) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--init ", path, ": missing tensor '", name, "' (shape ",
                                                     ShapeToString(p.shape()), " in this model)"));
    }
    const Tensor& t = it->second;
    if (t.shape() != p.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("--init ", path, ": tensor '", name, "' has shape ",
                                                     ShapeToString(t.shape()), ", expected ", ShapeToString(p.shape()),
                                                     " for this model (check the model flags)"));
    }
    if (t.dtype() != kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat("--init ", path, ": tensor '", name, "' is ", DTypeName(t.dtype()),
                                                     ", expected float32 (F32)"));
    }
    for (float v : t.ToVector()) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat("--init ", path, ": tensor '", name, "' holds a non-finite value"));
      }
    }
    out.emplace_back(name, t);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--init ", path, ": unexpected tensor '", by_name.begin()->first,
                                                   "' (this model has ", params.size(), " parameters, e.g. '",
                                                   params.empty() ? "" : params.front().first, "')"));
  }
  return out;
}

absl::Status LoadInitialWeights(const std::string& path, nn::Module& model, checkpoint::WeightsFormat format) {
  absl::StatusOr<NamedTensors> init = ReadInitialWeights(path, model, format);
  if (!init.ok()) return init.status();
  std::map<std::string, Tensor> state(init->begin(), init->end());
  absl::Status st = nn::LoadStateDict(model, state);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("--init ", path, ": ", st.message()));
  return absl::OkStatus();
}

}  // namespace psync::runtime
