// Between a live model + optimizer and CheckpointContents.
//
//   // save (rank 0, after step s's optimizer step):
//   checkpoint::CheckpointManifest m;  m.step = s + 1;  m.model = flags.model; ...
//   auto contents = checkpoint::CaptureTrainingState(model->named_parameters(), optimizer.get(), m);
//   ... WriteCheckpoint(dir, contents, opt) ...
//   // resume (after building the same model and optimizer):
//   PSYNC_RETURN_IF_ERROR(checkpoint::LoadParameters(loaded.contents, loaded.path, model->named_parameters()));
//   PSYNC_RETURN_IF_ERROR(checkpoint::LoadOptimizerState(loaded.contents, loaded.path, *optimizer));
//
// Threads: the training thread (the tensors are the live ones).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "worker/checkpoint/contents.h"
#include "psync/optim/optimizer.h"

namespace psync::checkpoint {

// The parameters' data and the optimizer's State() (handles to the live
// tensors, not copies: write them before the next step). Sets
// manifest.optimizer to optimizer->name(). `optimizer` may be null: a
// weights-only checkpoint (--save; manifest.optimizer empty, no state).
CheckpointContents CaptureTrainingState(const optim::NamedParams& params, const optim::Optimizer* optimizer,
                                        CheckpointManifest manifest);
// The same with the optimizer's state given (Optimizer::CheckpointState:
// gathered in full from a sharded optimizer); `optimizer_name` empty: weights only.
CheckpointContents CaptureTrainingState(const optim::NamedParams& params, const std::string& optimizer_name,
                                        NamedTensors optimizer_state, CheckpointManifest manifest);

// Whether the checkpoint's parameters fit `params`: every parameter must be
// there with the same shape and dtype and nothing else may be.
// InvalidArgument names `source` (the file), each tensor that does not fit,
// and both shapes / dtypes. Copies nothing (psync-worker --resume checks its
// candidates with it before joining the job).
absl::Status CheckParametersFit(const CheckpointContents& checkpoint, const std::string& source,
                                const optim::NamedParams& params);

// Copies the checkpoint's parameters into `params` (any device), once
// CheckParametersFit passed: nothing is copied otherwise.
absl::Status LoadParameters(const CheckpointContents& checkpoint, const std::string& source,
                            const optim::NamedParams& params);

// Restores the optimizer's state (Optimizer::LoadCheckpointState: exact,
// all or nothing; a sharded optimizer takes its slices, at any world size).
// The checkpoint's optimizer kind must be optimizer.name().
// InvalidArgument names `source` and the entry.
absl::Status LoadOptimizerState(const CheckpointContents& checkpoint, const std::string& source,
                                optim::Optimizer& optimizer);

}  // namespace psync::checkpoint
