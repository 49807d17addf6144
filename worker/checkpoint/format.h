// The on-disk names of a training checkpoint: file names in the checkpoint
// directory, the metadata keys, and the tensor-name prefix of optimizer
// state. One checkpoint is one safetensors file,
//
//   <dir>/ckpt-<step, at least 8 digits>.safetensors
//
// holding the model parameters under their own names, the optimizer state
// under "optim.", and the manifest in "__metadata__" (manifest.h). Writes go
// through a temporary file "<final name>.tmp.XXXXXX" in the same directory
// (common/atomic_file.h), so a leftover of a crashed write is recognisable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace psync::checkpoint {

// The manifest key that marks a checkpoint, and its value.
inline constexpr char kFormatKey[] = "format";
inline constexpr char kFormatName[] = "psync-checkpoint";
// Bump when a reader of the previous version would misread a new file.
inline constexpr int64_t kFormatVersion = 1;

// Tensors named "optim.<key>" are optimizer state entries "<key>".
inline constexpr char kOptimizerPrefix[] = "optim.";

// "ckpt-00000042.safetensors" (steps past 99,999,999 get more digits).
std::string CheckpointFileName(int64_t step);
// dir + "/" + name (one slash, whether or not dir ends with one).
std::string PathInDir(const std::string& dir, absl::string_view name);
// PathInDir(dir, CheckpointFileName(step)).
std::string CheckpointPath(const std::string& dir, int64_t step);

// The step of a checkpoint file name as CheckpointFileName writes it
// (exactly: "ckpt-1.safetensors" or "ckpt-00000001.safetensors.tmp.x" are
// not), or nullopt.
std::optional<int64_t> ParseCheckpointFileName(absl::string_view name);
// The step of a temporary file of an interrupted write of a checkpoint
// ("ckpt-00000042.safetensors.tmp.Ab12Cd"), or nullopt.
std::optional<int64_t> ParseTempFileName(absl::string_view name);

}  // namespace psync::checkpoint
