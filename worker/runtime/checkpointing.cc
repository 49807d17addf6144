#include "worker/runtime/checkpointing.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/exit_code.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/checkpoint/model_config.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/training_state.h"
#include "worker/checkpoint/writer.h"

namespace psync::runtime {
namespace {

// What this run's checkpoints say about it after `steps` steps (the
// optimizer kind comes from CaptureTrainingState).
checkpoint::CheckpointManifest RunManifest(const CheckpointOptions& opt, int world_size,
                                           const nn::ModelOptions& model_options, int64_t steps) {
  checkpoint::CheckpointManifest m;
  m.step = steps;
  m.model = opt.model;
  m.model_config = checkpoint::EncodeModelConfig(model_options);
  m.data_position = {{"next_step", steps}, {"global_batch", opt.global_batch}};
  m.world_size = world_size;
  return m;
}

}  // namespace

absl::StatusOr<int64_t> ResumeFromCheckpoint(const CheckpointOptions& opt, nn::Module& model,
                                             optim::Optimizer& optimizer) {
  if (!opt.resume) return 0;
  std::vector<checkpoint::SkippedCheckpoint> skipped;
  absl::StatusOr<std::optional<checkpoint::LoadedCheckpoint>> latest =
      checkpoint::LoadLatestCheckpoint(opt.dir, &skipped);
  for (const auto& s : skipped) PSYNC_LOG(WARNING) << "--resume: skipped " << s.path << ": " << s.reason;
  if (!latest.ok()) {
    return absl::Status(latest.status().code(), absl::StrCat("--resume: ", latest.status().message()));
  }
  if (!latest->has_value()) {
    PSYNC_LOG(INFO) << "--resume: no checkpoint in " << opt.dir << "; starting from step 0";
    return 0;
  }
  const checkpoint::LoadedCheckpoint& c = **latest;
  const checkpoint::CheckpointManifest& m = c.contents.manifest;
  if (m.model != opt.model) {
    return absl::InvalidArgumentError(absl::StrCat("--resume: ", c.path, " holds a ", m.model,
                                                   " model, this run trains --model=", opt.model));
  }
  if (m.step > opt.steps) {
    return absl::InvalidArgumentError(absl::StrCat("--resume: ", c.path, " is at step ", m.step,
                                                   ", past --steps=", opt.steps, " (raise --steps to train further)"));
  }
  PSYNC_RETURN_IF_ERROR(checkpoint::LoadParameters(c.contents, c.path, model.named_parameters()));
  PSYNC_RETURN_IF_ERROR(checkpoint::LoadOptimizerState(c.contents, c.path, optimizer));
  PSYNC_LOG(INFO) << "resumed from " << c.path << " (step " << m.step << ", written by " << m.world_size
                  << " ranks)";
  return m.step;
}

std::function<absl::Status(int64_t)> MakeCheckpointSaver(const CheckpointOptions& opt, int rank, int world_size,
                                                         const nn::ModelOptions& model_options, nn::Module* model,
                                                         optim::Optimizer* optimizer) {
  if (opt.dir.empty()) return nullptr;
  return [opt, rank, world_size, model_options, model, optimizer](int64_t steps) -> absl::Status {
    // Every rank holds the same weights (the averaged gradients made them
    // so); one writer is enough and avoids racing renames in a shared dir.
    // A sharded optimizer's state is gathered to it first (every rank takes
    // part), so the file is the same one logical checkpoint at any --zero.
    absl::StatusOr<NamedTensors> state = optimizer->CheckpointState(/*keep=*/rank == 0);
    if (!state.ok()) {
      return WithExitCode(absl::Status(state.status().code(), absl::StrCat("checkpoint: ", state.status().message())),
                          kExitPeerLost);
    }
    if (rank != 0) return absl::OkStatus();
    checkpoint::WriteOptions w;
    w.keep = static_cast<int>(opt.keep);
    absl::StatusOr<checkpoint::WrittenCheckpoint> out = checkpoint::WriteCheckpoint(
        opt.dir,
        checkpoint::CaptureTrainingState(model->named_parameters(), optimizer->name(), std::move(*state),
                                         RunManifest(opt, world_size, model_options, steps)),
        w);
    if (!out.ok()) {
      return WithExitCode(absl::Status(out.status().code(), absl::StrCat("checkpoint: ", out.status().message())),
                          kExitInternal);
    }
    for (const auto& e : out->retention_errors) PSYNC_LOG(WARNING) << "checkpoint retention: " << e;
    PSYNC_LOG(DEBUG) << "checkpoint " << out->path << " (" << out->bytes << " bytes)";
    return absl::OkStatus();
  };
}

absl::Status SaveWeights(const CheckpointOptions& opt, int world_size, const nn::ModelOptions& model_options,
                         const nn::Module& model, int64_t steps) {
  // The model's options ride along in the manifest, so psync-sample can rebuild it from this file alone.
  absl::StatusOr<uint64_t> bytes = checkpoint::WriteCheckpointFile(
      opt.save_path, checkpoint::CaptureTrainingState(model.named_parameters(), /*optimizer=*/nullptr,
                                                      RunManifest(opt, world_size, model_options, steps)));
  if (!bytes.ok()) return absl::Status(bytes.status().code(), absl::StrCat("--save: ", bytes.status().message()));
  PSYNC_LOG(DEBUG) << "--save: " << opt.save_path << " (" << *bytes << " bytes)";
  return absl::OkStatus();
}

}  // namespace psync::runtime
