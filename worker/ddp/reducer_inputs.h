// What Reducer::Create accepts, checked in one place: the options (caps,
// ZeRO stage, prefetch, comm hook with ZeRO) and the parameters (defined
// leaves that require grad, each listed once). The messages name the flag
// or the parameter.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "psync/autograd/variable.h"
#include "psync/ddp/reducer_options.h"

namespace psync::ddp {

absl::Status ValidateReducerInputs(const std::vector<autograd::Variable>& params, const ReducerOptions& options);

}  // namespace psync::ddp
