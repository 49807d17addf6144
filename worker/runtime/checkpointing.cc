#include "worker/runtime/checkpointing.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/exit_code.h"
#include "psync/common/logging.h"
#include "psync/common/status_macros.h"
#include "worker/checkpoint/format.h"
#include "worker/checkpoint/model_config.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/training_state.h"
#include "worker/checkpoint/writer.h"
#include "worker/control/heal.h"

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

// PSYNC_TEST_* hooks (checkpointing.h): the step they name, -1 when unset.
int64_t TestHookStep(const char* name) {
  const char* v = std::getenv(name);
  int64_t step = -1;
  if (v == nullptr || !absl::SimpleAtoi(v, &step)) return -1;
  PSYNC_LOG(WARNING) << "test hook " << name << "=" << step << " is set";
  return step;
}
int64_t TestStaleListingStep() {
  const int64_t s = TestHookStep("PSYNC_TEST_STALE_LISTING");
  return s < 0 ? INT64_MAX : s;
}
int64_t TestLateCheckpointStep() { return TestHookStep("PSYNC_TEST_LATE_CHECKPOINT"); }

// PSYNC_TEST_LATE_CHECKPOINT: the old interleaving, where rank 0 was still
// writing when its generation was aborted (at most 60 s, then it goes on).
void HoldUntilAborted(const control::PlanMailbox& plans, int64_t steps) {
  PSYNC_LOG(WARNING) << "test hook: rank 0 holds its checkpoint of step " << steps
                     << " until its generation is aborted";
  absl::Status why = plans.WaitForFailure(std::chrono::seconds(60));
  PSYNC_LOG(WARNING) << "test hook: rank 0 writes its checkpoint of step " << steps << " now ("
                     << (why.ok() ? "no abort within 60 s" : why.message()) << ")";
}

// The save guard: OK while the generation runs. Why: once it is aborted (or
// the plans failed) the next generation's ranks may already have listed the
// directory and agreed on a step; a file renamed in or deleted now could
// only make their listings disagree (and retention could delete the very
// checkpoint they are about to load).
absl::Status GenerationStillRuns(const control::PlanMailbox* plans, int rank, int64_t steps, const std::string& path) {
  if (plans == nullptr) return absl::OkStatus();
  absl::Status failure = plans->failure();
  if (failure.ok()) return absl::OkStatus();
  absl::Status refused =
      absl::Status(failure.code(), absl::StrCat("rank ", rank, ": not writing checkpoint ", path, " (step ", steps,
                                                "): the generation ended: ", failure.message()));
  // Logged here: the run's exit line names the failure itself, not this file.
  PSYNC_LOG(WARNING) << refused.message();
  return WithExitCode(refused, ExitCodeOf(failure, kExitPeerLost));
}

// What --resume takes from `c`: this run's model, of this run's shape (the
// flags that size it: --n-embd, --widths, ...), a step within --steps.
absl::Status CheckResumable(const CheckpointOptions& opt, const checkpoint::LoadedCheckpoint& c,
                            const optim::NamedParams& params) {
  const checkpoint::CheckpointManifest& m = c.contents.manifest;
  if (m.model != opt.model) {
    return absl::InvalidArgumentError(absl::StrCat("--resume: ", c.path, " holds a ", m.model,
                                                   " model, this run trains --model=", opt.model));
  }
  if (m.step > opt.steps) {
    return absl::InvalidArgumentError(absl::StrCat("--resume: ", c.path, " is at step ", m.step,
                                                   ", past --steps=", opt.steps, " (raise --steps to train further)"));
  }
  if (absl::Status st = checkpoint::CheckParametersFit(c.contents, c.path, params); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--resume: ", st.message(),
                                                   " (resume with the model flags that wrote it, or use another "
                                                   "--checkpoint-dir)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResumeScan> ScanCheckpoints(const CheckpointOptions& opt, const optim::NamedParams& params) {
  ResumeScan scan;
  if (!opt.resume) return scan;
  std::vector<checkpoint::SkippedCheckpoint> skipped;
  absl::StatusOr<checkpoint::LoadableCheckpoints> found =
      checkpoint::ListLoadableCheckpoints(opt.dir, kOfferedCheckpoints, TestStaleListingStep(), &skipped);
  for (const auto& s : skipped) PSYNC_LOG(WARNING) << "--resume: skipped " << s.path << ": " << s.reason;
  if (!found.ok()) return absl::Status(found.status().code(), absl::StrCat("--resume: ", found.status().message()));
  if (found->newest) {
    // The others are older checkpoints of the same run: the newest one speaks for them.
    PSYNC_RETURN_IF_ERROR(CheckResumable(opt, *found->newest, params));
  } else {
    PSYNC_LOG(INFO) << "--resume: no checkpoint in " << opt.dir << " loads; offering none (from step 0)";
  }
  scan.steps = std::move(found->steps);
  scan.paths = std::move(found->paths);
  scan.newest = std::move(found->newest);
  return scan;
}

absl::Status LoadAgreedCheckpoint(const CheckpointOptions& opt, int rank, int64_t step, ResumeScan& scan,
                                  nn::Module& model, optim::Optimizer& optimizer) {
  std::optional<checkpoint::LoadedCheckpoint> newest = std::move(scan.newest);
  scan.newest.reset();  // held since the scan; freed once this returns
  if (step == 0) {
    if (!scan.steps.empty()) {
      PSYNC_LOG(WARNING) << "--resume: no checkpoint step is loadable by every rank; starting from step 0 (rank "
                         << rank << " could load steps " << absl::StrJoin(scan.steps, ", ") << ")";
    }
    return absl::OkStatus();
  }
  const std::string path = checkpoint::CheckpointPath(opt.dir, step);
  auto failed = [&](absl::string_view why) {
    return WithExitCode(absl::InternalError(absl::StrCat("rank ", rank, ": cannot resume from ", path, " (step ", step,
                                                         ", agreed by every rank): ", why)),
                        kExitInternal);
  };
  if (std::find(scan.steps.begin(), scan.steps.end(), step) == scan.steps.end()) {
    return failed(absl::StrCat("this rank offered only steps ", absl::StrJoin(scan.steps, ", ")));
  }
  checkpoint::LoadedCheckpoint c;
  if (newest && newest->contents.manifest.step == step) {
    c = std::move(*newest);
  } else {
    // An older checkpoint than this rank's newest: another rank could not load that one.
    absl::StatusOr<checkpoint::CheckpointContents> contents = checkpoint::ReadCheckpoint(path);
    if (!contents.ok()) {
      return failed(absl::StrCat("it changed since this rank checked it: ", contents.status().message()));
    }
    c = checkpoint::LoadedCheckpoint{path, std::move(*contents)};
  }
  if (absl::Status st = CheckResumable(opt, c, model.named_parameters()); !st.ok()) return failed(st.message());
  if (absl::Status st = checkpoint::LoadParameters(c.contents, c.path, model.named_parameters()); !st.ok()) {
    return failed(st.message());
  }
  if (absl::Status st = checkpoint::LoadOptimizerState(c.contents, c.path, optimizer); !st.ok()) {
    return failed(st.message());
  }
  PSYNC_LOG(INFO) << "resumed from " << c.path << " (step " << step << ", written by " << c.contents.manifest.world_size
                  << " ranks; the newest step every rank can load)";
  return absl::OkStatus();
}

std::function<absl::Status(int64_t)> MakeCheckpointSaver(const CheckpointOptions& opt, int rank, int world_size,
                                                         const nn::ModelOptions& model_options, nn::Module* model,
                                                         optim::Optimizer* optimizer,
                                                         std::shared_ptr<const control::PlanMailbox> plans,
                                                         int64_t generation) {
  if (opt.dir.empty()) return nullptr;
  const int64_t late_step = generation == 1 ? TestLateCheckpointStep() : -1;
  return [opt, rank, world_size, model_options, model, optimizer, plans, late_step](int64_t steps) -> absl::Status {
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
    if (steps == late_step && plans) HoldUntilAborted(*plans, steps);
    checkpoint::WriteOptions w;
    w.keep = static_cast<int>(opt.keep);
    w.may_commit = [&] {
      return GenerationStillRuns(plans.get(), rank, steps, checkpoint::CheckpointPath(opt.dir, steps));
    };
    // Why check before encoding too: no point writing a file that will be refused.
    PSYNC_RETURN_IF_ERROR(w.may_commit());
    absl::StatusOr<checkpoint::WrittenCheckpoint> out = checkpoint::WriteCheckpoint(
        opt.dir,
        checkpoint::CaptureTrainingState(model->named_parameters(), optimizer->name(), std::move(*state),
                                         RunManifest(opt, world_size, model_options, steps)),
        w);
    if (!out.ok()) {
      if (ExitCodeIn(out.status())) return out.status();  // the guard's refusal, with the failure's code
      return WithExitCode(absl::Status(out.status().code(), absl::StrCat("checkpoint: ", out.status().message())),
                          kExitInternal);
    }
    for (const auto& e : out->retention_errors) PSYNC_LOG(WARNING) << "checkpoint retention: " << e;
    PSYNC_LOG(DEBUG) << "checkpoint " << out->path << " (" << out->bytes << " bytes)";
    return absl::OkStatus();
  };
}

absl::Status HealFromPeer(const CheckpointOptions& opt, int source, int world_size, int64_t step,
                          std::optional<int64_t> held_step, const nn::ModelOptions& model_options, nn::Module& model,
                          optim::Optimizer& optimizer, comm::ProcessGroup& group, std::chrono::milliseconds timeout) {
  control::HealOptions ho;
  ho.source = source;
  ho.timeout = timeout;
  return control::HealTrainingState(group, ho, held_step, model.named_parameters(), optimizer,
                                    RunManifest(opt, world_size, model_options, step));
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
