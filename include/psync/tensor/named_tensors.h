// NamedTensors: tensors under names, in a meaningful order (a state dict's
// registration order, a file's order). The one spelling of the idea, shared
// by the safetensors codec, optimizer state and checkpoints.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "psync/tensor/tensor.h"

namespace psync {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

}  // namespace psync
