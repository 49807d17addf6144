#include "worker/checkpoint/reader.h"

#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "worker/checkpoint/checksum.h"
#include "worker/checkpoint/directory.h"
#include "worker/checkpoint/format.h"
#include "worker/checkpoint/manifest.h"
#include "worker/safetensors/safetensors.h"

namespace psync::checkpoint {

bool IsCheckpoint(const std::map<std::string, std::string>& metadata) {
  auto f = metadata.find(kFormatKey);
  return f != metadata.end() && f->second == kFormatName;
}

absl::StatusOr<CheckpointContents> ReadCheckpoint(const std::string& path, Need need) {
  auto file = safetensors::ReadWithMetadata(path);  // its errors name the file
  if (!file.ok()) return Annotate(file.status(), "cannot load checkpoint");
  return DecodeCheckpoint(std::move(*file), path, need);
}

absl::StatusOr<CheckpointContents> ParseCheckpoint(absl::string_view bytes, const std::string& source, Need need) {
  absl::StatusOr<safetensors::Contents> file = safetensors::ParseWithMetadata(bytes, source);
  if (!file.ok()) return Annotate(file.status(), absl::StrCat("checkpoint ", source));
  return DecodeCheckpoint(*std::move(file), source, need);
}

absl::StatusOr<CheckpointContents> DecodeCheckpoint(safetensors::Contents file, const std::string& path, Need need) {
  CheckpointContents out;
  PSYNC_ASSIGN_OR_RETURN(out.manifest, DecodeManifest(file.metadata, path));
  auto stored = file.metadata.find(kChecksumKey);
  if (stored == file.metadata.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": metadata \"", kChecksumKey, "\" is missing (not a complete psync checkpoint)"));
  }
  PSYNC_ASSIGN_OR_RETURN(std::string actual, ContentChecksum(file.metadata, file.tensors));
  if (actual != stored->second) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": metadata \"", kChecksumKey, "\" is ",
                                            stored->second, " but the contents give ", actual,
                                            "; the file is corrupt"));
  }

  for (auto& [name, t] : file.tensors) {
    absl::string_view key = name;
    if (absl::ConsumePrefix(&key, kOptimizerPrefix)) {
      out.optimizer_state.emplace_back(std::string(key), std::move(t));
    } else {
      out.params.emplace_back(std::move(name), std::move(t));
    }
  }
  if (out.manifest.optimizer.empty() && !out.optimizer_state.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": metadata \"optimizer\" is empty but the file holds ",
                                                   out.optimizer_state.size(), " optimizer state tensors"));
  }
  if (need == Need::kTrainingState && out.manifest.weights_only()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " holds weights only (no optimizer state: a psync-worker --save file), "
        "so a run cannot resume from it; resume from a checkpoint written with --checkpoint-dir, or start a new "
        "run from these weights with --init=", path));
  }
  return out;
}

namespace {

// Damage (skip and look further back) as opposed to an environment problem
// (stop: the caller must see it).
bool IsDamage(const absl::Status& st) {
  return st.code() == absl::StatusCode::kInvalidArgument || st.code() == absl::StatusCode::kDataLoss ||
         st.code() == absl::StatusCode::kNotFound;
}

}  // namespace

absl::StatusOr<LoadableCheckpoints> ListLoadableCheckpoints(const std::string& dir, int at_most, int64_t max_step,
                                                            std::vector<SkippedCheckpoint>* skipped) {
  PSYNC_ASSIGN_OR_RETURN(CheckpointDirListing listing, ListCheckpointDir(dir));
  auto skip = [&](const std::string& path, std::string reason) {
    if (skipped != nullptr) skipped->push_back({path, std::move(reason)});
  };
  for (const CheckpointFile& tmp : listing.temp_files) {
    if (tmp.step <= max_step) skip(tmp.path, "temporary file of an interrupted write (never loaded)");
  }
  LoadableCheckpoints out;
  for (const CheckpointFile& f : listing.checkpoints) {
    if (static_cast<int>(out.steps.size()) >= at_most) break;
    if (f.step > max_step) continue;
    auto contents = ReadCheckpoint(f.path, Need::kTrainingState);
    if (!contents.ok()) {
      if (!IsDamage(contents.status())) return contents.status();
      skip(f.path, std::string(contents.status().message()));
      continue;
    }
    if (contents->manifest.step != f.step) {
      skip(f.path, absl::StrCat("its name says step ", f.step, " but its manifest says step ",
                                contents->manifest.step, " (renamed by hand?)"));
      continue;
    }
    out.steps.push_back(f.step);
    out.paths.push_back(f.path);
    if (!out.newest) out.newest = LoadedCheckpoint{f.path, std::move(*contents)};
  }
  return out;
}

absl::StatusOr<std::optional<LoadedCheckpoint>> LoadLatestCheckpoint(const std::string& dir,
                                                                     std::vector<SkippedCheckpoint>* skipped) {
  PSYNC_ASSIGN_OR_RETURN(LoadableCheckpoints found, ListLoadableCheckpoints(dir, 1, INT64_MAX, skipped));
  return std::move(found.newest);
}

absl::StatusOr<std::optional<std::string>> FindLatestCheckpoint(const std::string& dir,
                                                                std::vector<SkippedCheckpoint>* skipped) {
  PSYNC_ASSIGN_OR_RETURN(std::optional<LoadedCheckpoint> latest, LoadLatestCheckpoint(dir, skipped));
  if (!latest) return std::nullopt;
  return std::move(latest->path);
}

}  // namespace psync::checkpoint
