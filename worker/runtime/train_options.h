// What the training loop takes from psync-worker's flags (docs/cli-contract.md),
// built once by TrainOptionsFrom (run_options.h): the trainer never sees the
// whole command line.
#pragma once

#include <chrono>
#include <cstdint>

namespace psync::runtime {

enum class SkipPattern { kAlways, kOdd, kLastMicro };
const char* SkipPatternName(SkipPattern p);

// --skip-layer / --skip-block with --skip-pattern: which forwards bypass a
// layer (MLP) or block (GPT).
struct SkipSchedule {
  int layer = -1;  // -1 = none
  SkipPattern pattern = SkipPattern::kAlways;
  // True when `layer` is skipped in micro-batch `micro` (of `accumulate`)
  // of step `step`.
  bool Active(int64_t step, int64_t micro, int64_t accumulate) const;
};

struct TrainOptions {
  int64_t steps = 100;
  int64_t global_batch = 64;   // examples per optimizer step over all ranks
  int64_t accumulate = 1;      // micro-batches per step (the first M-1 under no_sync)
  int64_t block_size = 64;     // tokens per sequence: a language model's items per example
  SkipSchedule skip;
  bool find_unused_parameters = false;
  double clip_grad_norm = 0;   // 0 = off
  int64_t eval_every = 0;      // 0: only after the last step (when there is held-out data)
  int64_t eval_examples = 0;   // 0 = all
  int64_t eval_batch = 64;
  // A checkpoint every N steps (0: only at the end and on a stop), when the
  // trainer has a save hook (TrainContext::save_checkpoint).
  int64_t checkpoint_every = 0;
  int64_t progress_every = 10;  // rank 0's progress line (0 = never)
  bool quiet = false;           // no progress or summary lines
  std::chrono::milliseconds timeout{30000};  // plan waits, evaluation's exchange
  // A plan wait may also outlast a lost coordinator this long (--coordinator-grace).
  std::chrono::milliseconds coordinator_grace{0};
};

}  // namespace psync::runtime
