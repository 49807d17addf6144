// Writing a checkpoint: one safetensors file, atomically, then retention
// (WriteCheckpoint, a training run's --checkpoint-dir); or one file at a
// path of the caller's choice, without retention (WriteCheckpointFile,
// psync-worker --save: a weights-only checkpoint).
//
//   checkpoint::WriteOptions opt;  opt.keep = flags.keep_checkpoints;
//   PSYNC_ASSIGN_OR_RETURN(checkpoint::WrittenCheckpoint w,
//                          checkpoint::WriteCheckpoint(flags.checkpoint_dir, contents, opt));
//
// Steps: validate; copy CUDA tensors to the host; compute the content
// checksum; write "<dir>/ckpt-<step>.safetensors" through a temporary file
// in `dir` (fsync, rename, fsync of the directory: common/atomic_file.h), so
// a crash at any moment leaves either no new file or a complete one; read
// it back and validate it (WriteOptions::verify); only then apply retention
// (retention.h). A checkpoint of the same step is replaced.
//
// Threads: call from one thread per directory (rank 0's training thread).
// The tensors are read while writing: do not step the optimizer meanwhile.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/checkpoint/contents.h"

namespace psync::checkpoint {

struct WriteOptions {
  int keep = 0;        // --keep-checkpoints: keep the newest K checkpoints (0 = all)
  bool verify = true;  // read the new file back in full before retention deletes anything
  // Asked right before the new file is renamed into place, and again before
  // retention deletes older files (empty: always go on). An error before the
  // rename cancels the write (the temporary file is removed, the directory
  // is as before) and WriteCheckpoint returns it; before retention it only
  // skips retention (the file is in place; a retention_errors line says
  // why). A training run passes "is my generation still running?": a rank
  // must not change the directory once its generation is aborted, since the
  // next generation's ranks may already have listed it.
  std::function<absl::Status()> may_commit;
};

struct WrittenCheckpoint {
  std::string path;
  uint64_t bytes = 0;
  std::vector<std::string> removed;           // deleted by retention (older checkpoints, stale temp files)
  std::vector<std::string> retention_errors;  // deletions that failed; the new checkpoint is fine
};

// Creates `dir` if needed. Errors: InvalidArgument naming the field or the
// tensor (bad manifest, duplicate / empty / "optim."-prefixed parameter
// names, undefined tensors, optimizer state without an optimizer kind,
// keep < 0); I/O errors naming the file; DataLoss when the written file does
// not read back (nothing is deleted then).
absl::StatusOr<WrittenCheckpoint> WriteCheckpoint(const std::string& dir, const CheckpointContents& contents,
                                                  const WriteOptions& options = {});

// The same file written to exactly `path` (whose directory must exist),
// read back in full when `verify`; nothing else in the directory is
// touched. Returns the file's size. A weights-only checkpoint (--save) is
// CaptureTrainingState(params, nullptr, manifest): no optimizer state and an
// empty manifest.optimizer. Errors as for WriteCheckpoint.
absl::StatusOr<uint64_t> WriteCheckpointFile(const std::string& path, const CheckpointContents& contents,
                                             bool verify = true);

// The exact bytes WriteCheckpointFile writes, in memory: a training state
// sent over the network instead of a disk (control/heal.h). ParseCheckpoint
// (reader.h) reads them back with every check a file gets.
absl::StatusOr<std::string> SerializeCheckpoint(const CheckpointContents& contents);

}  // namespace psync::checkpoint
