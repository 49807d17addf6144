// Reading training checkpoints back, with everything validated: the
// safetensors structure (header bounds, JSON, dtypes, shapes against byte
// ranges, ranges tiling the file exactly, so any truncation is caught), the
// manifest (required keys, well-formed values, format version) and the
// content checksum (checksum.h). Errors name the file and the field.
//
// Threads: stateless functions; safe from any thread (not on the same
// directory as a concurrent writer's retention, which may delete files:
// a vanished file is skipped like a torn one).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/checkpoint/contents.h"
#include "worker/safetensors/safetensors.h"

namespace psync::checkpoint {

// What a caller is going to load from a checkpoint.
enum class Need {
  kWeights,        // the parameters only (psync-sample, --init): a weights-only file (--save) will do
  kTrainingState,  // parameters and optimizer state (--resume): a weights-only file is refused
};

// The whole checkpoint at `path` as CPU tensors (parameters in file order,
// which is the writer's order). Errors: InvalidArgument for a malformed or
// truncated file, DataLoss for a checksum mismatch, FailedPrecondition for
// another format version or, with Need::kTrainingState, for a weights-only
// file (naming it), NotFound / PermissionDenied / Internal for I/O.
absl::StatusOr<CheckpointContents> ReadCheckpoint(const std::string& path, Need need = Need::kTrainingState);

// The same checks on a file already read (weights.h reads one file that may
// be a checkpoint or not); `path` names it in errors.
absl::StatusOr<CheckpointContents> DecodeCheckpoint(safetensors::Contents file, const std::string& path, Need need);

// The same checks on a checkpoint's bytes held in memory (SerializeCheckpoint's,
// received from a peer); `source` names them in errors ("rank 1's training state").
absl::StatusOr<CheckpointContents> ParseCheckpoint(absl::string_view bytes, const std::string& source, Need need);

// Whether safetensors metadata says "this is a psync checkpoint" (its
// "format" key); a --save file or another tool's file is not.
bool IsCheckpoint(const std::map<std::string, std::string>& metadata);

// A checkpoint file FindLatestCheckpoint passed over, and why.
struct SkippedCheckpoint {
  std::string path;
  std::string reason;
};

struct LoadedCheckpoint {
  std::string path;
  CheckpointContents contents;
};

// The newest checkpoint in `dir` that loads, read once: candidates are
// tried from the highest step down; torn, corrupt or vanished files and
// leftover temporary files are skipped and, when `skipped` is given,
// appended to it with the reason (print them: a skipped newest checkpoint
// means lost progress). nullopt when none loads or `dir` does not exist.
// Errors (returned, not skipped): the directory cannot be listed, or a
// candidate fails for a reason other than damage (permission, I/O, a newer
// format version, a weights-only file: this is --resume's reader, it needs
// Need::kTrainingState), so a resume never silently falls back past it.
absl::StatusOr<std::optional<LoadedCheckpoint>> LoadLatestCheckpoint(
    const std::string& dir, std::vector<SkippedCheckpoint>* skipped = nullptr);

// The newest `at_most` checkpoints of `dir` that load, for the resume
// agreement (coordinator.proto): each candidate is read in full, from the
// highest step down, and skipped like LoadLatestCheckpoint's; steps above
// `max_step` are not considered (a listing as of an earlier moment). The
// newest one's contents are kept (usually the one loaded next), the others
// only checked, so at most two are in memory at once. Errors as for
// LoadLatestCheckpoint.
struct LoadableCheckpoints {
  std::vector<int64_t> steps;              // newest first; empty = none loads
  std::vector<std::string> paths;          // steps[i]'s file
  std::optional<LoadedCheckpoint> newest;  // steps[0]'s contents
};
absl::StatusOr<LoadableCheckpoints> ListLoadableCheckpoints(const std::string& dir, int at_most,
                                                            int64_t max_step = INT64_MAX,
                                                            std::vector<SkippedCheckpoint>* skipped = nullptr);

// Like LoadLatestCheckpoint, returning only the path (it reads each
// candidate in full to validate it).
absl::StatusOr<std::optional<std::string>> FindLatestCheckpoint(
    const std::string& dir, std::vector<SkippedCheckpoint>* skipped = nullptr);

}  // namespace psync::checkpoint
