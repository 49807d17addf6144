// When the worker reads and writes checkpoints (worker/checkpoint is the
// file format): --resume loads the newest complete checkpoint of
// --checkpoint-dir into the model and optimizer before the job is joined,
// the trainer's save hook writes one on rank 0 (every --checkpoint-every
// steps, at the end, on a stop), and --save writes the final weights as a
// weights-only checkpoint (the same manifest, no optimizer state), which
// psync-sample and --init read.
//
// Every rank reads the same file itself (a shared directory: one host, or a
// volume in Kubernetes), so every rank starts from the same bits and reports
// the same start iteration in Join; the coordinator refuses a disagreement.
// The data position is the step (data/README.md: batch k of step s is a
// function of s), and the schedule's rate is a function of the step, so
// weights + optimizer state + step is the whole state of a run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/nn/models/model.h"
#include "worker/optim/optimizer.h"

namespace psync::runtime {

// What checkpointing takes from the flags (run_options.h builds it).
struct CheckpointOptions {
  std::string model;          // --model: recorded in every checkpoint, checked by --resume
  std::string dir;            // --checkpoint-dir; empty = no checkpoints
  int64_t keep = 3;           // --keep-checkpoints (0 = all)
  bool resume = false;        // --resume
  std::string save_path;      // --save; empty = none
  int64_t steps = 0;          // --steps: a checkpoint past it is refused
  int64_t global_batch = 0;   // recorded as the data position
};

// --resume: the step to start at (0 when --resume is off or the directory
// holds no loadable checkpoint). Prints which file it took and any newer
// file it skipped (damaged or torn). Errors name the file and the tensor.
absl::StatusOr<int64_t> ResumeFromCheckpoint(const CheckpointOptions& opt, nn::Module& model,
                                             optim::Optimizer& optimizer);

// The trainer's save hook (TrainContext::save_checkpoint): on rank 0 writes
// DIR/ckpt-<steps>.safetensors with the weights, the optimizer state and a
// manifest, keeping the newest --keep-checkpoints; other ranks do nothing.
std::function<absl::Status(int64_t)> MakeCheckpointSaver(const CheckpointOptions& opt, int rank, int world_size,
                                                         const nn::ModelOptions& model_options, nn::Module* model,
                                                         optim::Optimizer* optimizer);

// --save (rank 0, after a clean end): writes the model's weights after
// `steps` steps to --save as a weights-only checkpoint. Errors name --save
// and the file.
absl::Status SaveWeights(const CheckpointOptions& opt, int world_size, const nn::ModelOptions& model_options,
                         const nn::Module& model, int64_t steps);

}  // namespace psync::runtime
