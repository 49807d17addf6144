#include "worker/ddp/reducer_inputs.h"

#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "worker/ddp/bucket.h"

namespace psync::ddp {

absl::Status ValidateReducerInputs(const std::vector<autograd::Variable>& params, const ReducerOptions& options) {
  if (params.empty()) return absl::InvalidArgumentError("Reducer needs at least one parameter");
  PSYNC_RETURN_IF_ERROR(options.bucket_caps.Validate());
  if (options.zero_stage < 0 || options.zero_stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat("--zero must be 0, 1, 2 or 3, got ", options.zero_stage));
  }
  if (options.zero3_prefetch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--zero3-prefetch must be >= 0, got ", options.zero3_prefetch));
  }
  if (options.zero_stage > 0 && options.comm_hook) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--zero=", options.zero_stage, " reduce-scatters the plain gradients: it cannot be combined with the comm "
        "hook '", options.comm_hook->name(), "' (--grad-compression)"));
  }
  std::unordered_set<const autograd::VariableState*> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    const autograd::Variable& p = params[i];
    if (!p.defined() || !p.requires_grad() || !p.is_leaf()) {
      return absl::InvalidArgumentError(
          absl::StrCat(ParameterName(p, i), " is not a leaf that requires grad; DDP reduces parameters only"));
    }
    if (!seen.insert(p.state().get()).second) {
      return absl::InvalidArgumentError(absl::StrCat(ParameterName(p, i), " is listed twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace psync::ddp
