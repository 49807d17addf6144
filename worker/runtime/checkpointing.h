// When the worker reads and writes checkpoints (worker/checkpoint is the
// file format): with --resume, before the job is joined, each rank lists the
// checkpoints of --checkpoint-dir it can load (ScanCheckpoints: the newest
// few, each read in full) and joins with their steps; the coordinator picks
// the newest step every rank can load, once per generation (coordinator.proto,
// "Resume agreement"), and after Join each rank loads exactly that one
// (LoadAgreedCheckpoint). The trainer's save hook writes one on rank 0
// (every --checkpoint-every steps, at the end, on a stop), never once the
// generation is aborted; --save writes the final weights as a weights-only
// checkpoint (the same manifest, no optimizer state), which psync-sample and
// --init read.
//
// Why the agreement: a rank that picked "the newest file" itself could see
// another directory than its peers (a replacement that listed it before a
// peer's last checkpoint landed), and ranks starting at different steps
// cannot train together. Every rank reads the same file itself (a shared
// directory: one host, or a volume in Kubernetes), so every rank starts from
// the same bits. The data position is the step (data/README.md: batch k of
// step s is a function of s), and the schedule's rate is a function of the
// step, so weights + optimizer state + step is the whole state of a run.
//
// Test hooks (environment; the restart-race test in worker_it.sh sets them,
// nothing else should): PSYNC_TEST_STALE_LISTING=S makes ScanCheckpoints
// ignore checkpoints above step S (a listing made before they were written);
// PSYNC_TEST_LATE_CHECKPOINT=S makes rank 0 of generation 1 hold its
// checkpoint of step S until the generation is aborted (at most 60 s) and
// only then try to write it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "psync/comm/process_group.h"
#include "worker/checkpoint/reader.h"
#include "worker/control/plan_mailbox.h"
#include "psync/nn/models/model.h"
#include "psync/optim/optimizer.h"

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

// --resume, before Join: the checkpoints this rank can load
// (JoinRequest.checkpoint_steps). Empty without --resume.
struct ResumeScan {
  std::vector<int64_t> steps;                          // newest first
  std::vector<std::string> paths;                      // steps[i]'s file
  std::optional<checkpoint::LoadedCheckpoint> newest;  // steps[0]'s contents, read while checking it
};
// Lists and checks the newest kOfferedCheckpoints of --checkpoint-dir, prints
// any file it skipped (damaged or torn). Errors (bad input, exit 2): the
// directory cannot be read, a checkpoint of another --model, of another
// shape than `params` (the model this run built: the error names each
// tensor and both shapes) or past --steps, a file that fails for a reason
// other than damage; each names the file. Why here, before Join: after it,
// a launcher would restart the same bad input over and over.
inline constexpr int kOfferedCheckpoints = 3;
absl::StatusOr<ResumeScan> ScanCheckpoints(const CheckpointOptions& opt, const optim::NamedParams& params);

// After Join: loads the checkpoint of `step` (JoinResponse.start_iteration,
// the step every rank agreed on; 0 = none, the model keeps its initial
// weights) into the model and optimizer, and releases scan.newest. Errors
// name the rank, the step and the file; exit 1 (the file changed since the
// scan), which a launcher restarts.
absl::Status LoadAgreedCheckpoint(const CheckpointOptions& opt, int rank, int64_t step, ResumeScan& scan,
                                  nn::Module& model, optim::Optimizer& optimizer);

// The trainer's save hook (TrainContext::save_checkpoint): on rank 0 writes
// DIR/ckpt-<steps>.safetensors with the weights, the optimizer state and a
// manifest, keeping the newest --keep-checkpoints; other ranks do nothing
// (but take part in gathering a sharded optimizer's state). `plans` (may be
// null: no guard) is the generation's plan mailbox: once it has failed (an
// ABORT, the coordinator stream lost) no file is written or deleted; the
// check runs right before the rename. That error names the rank, the step
// and the file, and carries the failure's exit code. `generation`: the
// session's (JoinResponse.generation), for the test hook.
std::function<absl::Status(int64_t)> MakeCheckpointSaver(const CheckpointOptions& opt, int rank, int world_size,
                                                         const nn::ModelOptions& model_options, nn::Module* model,
                                                         optim::Optimizer* optimizer,
                                                         std::shared_ptr<const control::PlanMailbox> plans,
                                                         int64_t generation = 1);

// Live recovery (coordinator.proto, "Live recovery"): control::HealTrainingState
// with this run's manifest at `step` (the weights, the optimizer state and
// the step from rank `source`; `held_step`: the step of this rank's own
// state, none for a fresh process). Its errors name this rank and the
// source and carry the exit code. Not with --zero (psync-worker then
// resumes from a checkpoint instead).
absl::Status HealFromPeer(const CheckpointOptions& opt, int source, int world_size, int64_t step,
                          std::optional<int64_t> held_step, const nn::ModelOptions& model_options, nn::Module& model,
                          optim::Optimizer& optimizer, comm::ProcessGroup& group, std::chrono::milliseconds timeout);

// --save (rank 0, after a clean end): writes the model's weights after
// `steps` steps to --save as a weights-only checkpoint. Errors name --save
// and the file.
absl::Status SaveWeights(const CheckpointOptions& opt, int world_size, const nn::ModelOptions& model_options,
                         const nn::Module& model, int64_t steps);

}  // namespace psync::runtime
