#include "worker/checkpoint/training_state.h"

#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "psync/tensor/ops.h"

namespace psync::checkpoint {
namespace {

std::string Describe(const Tensor& t) { return absl::StrCat(ShapeToString(t.shape()), " ", DTypeName(t.dtype())); }

}  // namespace

CheckpointContents CaptureTrainingState(const optim::NamedParams& params, const optim::Optimizer* optimizer,
                                        CheckpointManifest manifest) {
  if (optimizer == nullptr) return CaptureTrainingState(params, "", {}, std::move(manifest));
  return CaptureTrainingState(params, optimizer->name(), optimizer->State(), std::move(manifest));
}

CheckpointContents CaptureTrainingState(const optim::NamedParams& params, const std::string& optimizer_name,
                                        NamedTensors optimizer_state, CheckpointManifest manifest) {
  CheckpointContents c;
  c.params.reserve(params.size());
  for (const auto& [name, p] : params) c.params.emplace_back(name, p.data());
  // Without an optimizer: a weights-only checkpoint.
  manifest.optimizer = optimizer_name;
  if (!optimizer_name.empty()) c.optimizer_state = std::move(optimizer_state);
  c.manifest = std::move(manifest);
  return c;
}

absl::Status CheckParametersFit(const CheckpointContents& checkpoint, const std::string& source,
                                const optim::NamedParams& params) {
  std::map<std::string, const Tensor*> saved;
  for (const auto& [name, t] : checkpoint.params) saved.emplace(name, &t);
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  for (const auto& [name, p] : params) {
    wanted.insert(name);
    auto it = saved.find(name);
    if (it == saved.end()) {
      problems.push_back(absl::StrCat("parameter ", json::Quote(name), " is missing"));
      continue;
    }
    const Tensor& got = *it->second;
    const Tensor& want = p.data();
    if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
      problems.push_back(absl::StrCat("parameter ", json::Quote(name), " is ", Describe(got),
                                      " in the checkpoint but ", Describe(want), " in the model"));
    }
  }
  for (const auto& [name, t] : checkpoint.params) {
    if (!wanted.count(name)) problems.push_back(absl::StrCat("unexpected parameter ", json::Quote(name)));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", source, " does not fit the model (",
                                                   checkpoint.manifest.model, "): ", absl::StrJoin(problems, "; ")));
  }
  return absl::OkStatus();
}

absl::Status LoadParameters(const CheckpointContents& checkpoint, const std::string& source,
                            const optim::NamedParams& params) {
  PSYNC_RETURN_IF_ERROR(CheckParametersFit(checkpoint, source, params));
  std::map<std::string, const Tensor*> saved;
  for (const auto& [name, t] : checkpoint.params) saved.emplace(name, &t);
  for (const auto& [name, p] : params) {
    PSYNC_RETURN_IF_ERROR(RunCatching(
        absl::StrCat("checkpoint ", source, ": copying parameter ", json::Quote(name), " into the model"),
        [&] { ops::Copy(p.mutable_data(), *saved.at(name)); }));
  }
  return absl::OkStatus();
}

absl::Status LoadOptimizerState(const CheckpointContents& checkpoint, const std::string& source,
                                optim::Optimizer& optimizer) {
  if (checkpoint.manifest.optimizer != optimizer.name()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", source, " holds ",
        checkpoint.manifest.optimizer.empty() ? "no optimizer state"
                                              : absl::StrCat("state of optimizer ", checkpoint.manifest.optimizer),
        " but this run uses ", optimizer.name(), " (--optimizer must match to resume)"));
  }
  return Annotate(optimizer.LoadCheckpointState(checkpoint.optimizer_state), absl::StrCat("checkpoint ", source));
}

}  // namespace psync::checkpoint
