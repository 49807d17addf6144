// --init: initial weights for a model from a file read by
// checkpoint::ReadModelWeights (the reader psync-sample uses too): a --save
// file or a training checkpoint (its weights; optimizer state is ignored),
// an older --save file, or a plain safetensors state dict (PyTorch). They
// are checked against the model before anything is copied: every parameter
// present with its shape (float32, finite values), nothing else in the file.
// Errors are InvalidArgument naming the file and the first offending tensor,
// with the shape the model expects (PyTorch's state_dict names:
// "layers.0.weight", "h.3.attn.c_attn.weight", ...). A GPT-2 in Hugging
// Face's layout is converted first (`format`, checkpoint/weights.h:
// detected by default).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/checkpoint/weights.h"
#include "psync/nn/module.h"
#include "psync/tensor/named_tensors.h"

namespace psync::runtime {

// The file's tensors in the model's registration order, validated.
absl::StatusOr<NamedTensors> ReadInitialWeights(const std::string& path, const nn::Module& model,
                                                checkpoint::WeightsFormat format = checkpoint::WeightsFormat::kAuto);
// ReadInitialWeights, then copies them into the model's parameters.
absl::Status LoadInitialWeights(const std::string& path, nn::Module& model,
                                checkpoint::WeightsFormat format = checkpoint::WeightsFormat::kAuto);

}  // namespace psync::runtime
