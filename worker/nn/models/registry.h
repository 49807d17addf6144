// The models psync-worker can train, chosen by --model.
#pragma once

#include "common/registry.h"
#include "worker/nn/models/model.h"

namespace psync::nn {

// mlp, gpt, cnn. The factories validate the options
// (InvalidArgument naming the flag) before building anything.
const Registry<Model, ModelOptions>& Models();

}  // namespace psync::nn
