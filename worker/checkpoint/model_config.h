// nn::ModelOptions <-> the manifest's model_config (flag-like key/values),
// so a checkpoint alone says how to rebuild its model (psync-sample):
//
//   widths=32,64,16  vocab_size=256  block_size=64  input_shape=1,28,28
//   num_classes=10  seed=0
//   flag.n-layer=4  flag.n-head=4  flag.attention=fused   (the model's own
//   flags, model_flags.h: gpt's, cnn's or a registered model's)
//
// Every field is written (zero / empty when the model does not use it).
// The device is not: it is where the reader runs, not part of the model.
// When ModelOptions gains a field, add it here: a reader fills fields a
// file lacks with ModelOptions' defaults and refuses keys it does not know.
// Files from psync before 0.9 name the GPT's and the CNN's options as
// fields (n_layer=4, cnn_channels=16,32, written for every model): they
// read as the flags of the model the file holds and are dropped for others.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "psync/nn/models/model.h"

namespace psync::checkpoint {

std::map<std::string, std::string> EncodeModelConfig(const nn::ModelOptions& options);

// How a model is recorded in a safetensors file's metadata, the same in a
// checkpoint's manifest and in the older --save files (plain safetensors
// files, still read by weights.h): "model" = the kind, "model.<key>" =
// EncodeModelConfig's entries.
inline constexpr char kModelKindKey[] = "model";
// EncodeModelConfig's key of a registered model's own flag: "flag.<name>"
// (model_flags.h).
inline constexpr char kModelFlagPrefix[] = "flag.";
inline constexpr char kModelConfigPrefix[] = "model.";

struct ModelRecord {
  std::string kind;                           // "" when the metadata names none
  std::map<std::string, std::string> config;  // for DecodeModelConfig
};
// The model entries of `metadata` (other keys are ignored).
ModelRecord ModelFromMetadata(const std::map<std::string, std::string>& metadata);

// `model.config` read back, for a model of kind `model.kind`.
// InvalidArgument naming `source` (the checkpoint file) and the key.
absl::StatusOr<nn::ModelOptions> DecodeModelConfig(const ModelRecord& model, const std::string& source);

}  // namespace psync::checkpoint
