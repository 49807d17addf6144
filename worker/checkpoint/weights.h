// Model weights from a file, through the one path psync-sample and --init
// share. It accepts:
//
//   * a checkpoint (format "psync-checkpoint"): what psync-worker --save
//     writes (weights only) and what --checkpoint-dir holds (weights and
//     optimizer state, which is left out here); validated like every
//     checkpoint (structure, manifest, CRC);
//   * any other safetensors file, taken as a state dict: the --save files
//     of psync before --save wrote checkpoints (metadata "model",
//     "model.<key>", "steps_completed") or a PyTorch state_dict.
//
// Threads: a stateless function; safe from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "worker/checkpoint/model_config.h"
#include "worker/tensor/named_tensors.h"

namespace psync::checkpoint {

struct ModelWeights {
  // The model the file records (the manifest's, or the older --save file's
  // "model" / "model.<key>" metadata); kind "" and no config when it
  // records none (a plain state dict).
  ModelRecord model;
  NamedTensors params;  // CPU tensors under the model's names, in file order
};

// Errors name `path`: a malformed or truncated file (InvalidArgument), a
// checkpoint that fails its checks (as ReadCheckpoint with Need::kWeights),
// I/O (NotFound, PermissionDenied, Internal).
absl::StatusOr<ModelWeights> ReadModelWeights(const std::string& path);

}  // namespace psync::checkpoint
