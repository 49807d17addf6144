// What a checkpoint directory holds: checkpoint files by step, and leftovers
// of interrupted writes (temporary files, never loaded). Other files are
// ignored, so a checkpoint directory may hold anything else too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync::checkpoint {

struct CheckpointFile {
  int64_t step = 0;
  std::string path;  // PathInDir(dir, file name)
};

struct CheckpointDirListing {
  std::vector<CheckpointFile> checkpoints;  // "ckpt-<step>.safetensors", newest (highest step) first
  std::vector<CheckpointFile> temp_files;   // "ckpt-<step>.safetensors.tmp.*", newest first
};

// A directory that does not exist lists as empty (nothing written yet).
// Errors (not a directory, permission) name the directory.
absl::StatusOr<CheckpointDirListing> ListCheckpointDir(const std::string& dir);

}  // namespace psync::checkpoint
