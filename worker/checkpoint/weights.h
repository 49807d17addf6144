// Model weights from a file, through the one path psync-sample and --init
// share. It accepts:
//
//   * a checkpoint (format "psync-checkpoint"): what psync-worker --save
//     writes (weights only) and what --checkpoint-dir holds (weights and
//     optimizer state, which is left out here); validated like every
//     checkpoint (structure, manifest, CRC);
//   * any other safetensors file, taken as a state dict: the --save files
//     of psync before --save wrote checkpoints (metadata "model",
//     "model.<key>", "steps_completed") or a PyTorch state_dict;
//   * a GPT-2 checkpoint in Hugging Face's layout (hf_gpt2.h: Conv1D
//     weights transposed, "transformer." names, buffers dropped, the tied
//     lm_head checked), converted to psync's names and layout; detected
//     (WeightsFormat::kAuto) or named (--init-format=hf).
//
// Threads: a stateless function; safe from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "worker/checkpoint/model_config.h"
#include "psync/tensor/named_tensors.h"

namespace psync::checkpoint {

struct ModelWeights {
  // The model the file records (the manifest's, or the older --save file's
  // "model" / "model.<key>" metadata); kind "" and no config when it
  // records none (a plain state dict).
  ModelRecord model;
  NamedTensors params;  // CPU tensors under the model's names, in file order
  bool hf_layout = false;  // read from Hugging Face's GPT-2 layout (converted)
};

// How a file's tensors are laid out: kAuto tells HF's layout from its names
// and shapes (LooksLikeHfGpt2); kPsync takes the names as they are; kHf
// converts (a psync checkpoint is always read as one).
enum class WeightsFormat { kAuto, kPsync, kHf };
// "auto" | "psync" | "hf" (--init-format); InvalidArgument otherwise.
absl::StatusOr<WeightsFormat> ParseWeightsFormat(const std::string& text);

// Errors name `path`: a malformed or truncated file (InvalidArgument), a
// checkpoint that fails its checks (as ReadCheckpoint with Need::kWeights),
// an HF file that is not GPT-2 (InvalidArgument naming the tensor), I/O
// (NotFound, PermissionDenied, Internal).
absl::StatusOr<ModelWeights> ReadModelWeights(const std::string& path, WeightsFormat format = WeightsFormat::kAuto);

}  // namespace psync::checkpoint
