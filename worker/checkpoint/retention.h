// --keep-checkpoints=K: which checkpoint files stay in the directory after
// a new one is durable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace psync::checkpoint {

struct RetentionResult {
  std::vector<std::string> removed;  // paths deleted
  std::vector<std::string> errors;   // what could not be listed or deleted (nothing else depends on it)
};

// Called after the checkpoint of step `written_step` was written and read
// back: keeps the `keep` newest checkpoints by step (0 = all) and always the
// one of `written_step` (so the only checkpoint known to load is never
// deleted, even when a newer, torn file from an earlier run sorts above
// it); deletes the other checkpoint files. Also deletes leftover temporary
// files of steps <= `written_step`: interrupted writes that can never
// complete (the writer is past them).
RetentionResult ApplyRetention(const std::string& dir, int keep, int64_t written_step);

}  // namespace psync::checkpoint
