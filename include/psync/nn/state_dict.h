// State dicts: a module's parameters by dotted name, for checkpoints and
// for broadcasting the initial weights.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "psync/nn/module.h"

namespace psync::nn {

// (name, data) in registration order. The tensors are the live parameter
// data (handles, not copies): Clone them to keep a snapshot.
std::vector<std::pair<std::string, Tensor>> StateDict(const Module& module);

// Copies every entry into the parameter of the same name, in place (any
// device to any device). Checks everything first and changes nothing on
// error: InvalidArgument listing the missing, unexpected and mis-shaped
// parameters by name.
absl::Status LoadStateDict(Module& module, const std::map<std::string, Tensor>& state);

}  // namespace psync::nn
