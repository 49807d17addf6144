#include "worker/checkpoint/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "worker/checkpoint/build_info.h"
#include "worker/checkpoint/checksum.h"
#include "worker/checkpoint/format.h"
#include "worker/checkpoint/manifest.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/retention.h"
#include "worker/safetensors/safetensors.h"

namespace psync::checkpoint {
namespace {

absl::Status Invalid(absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("cannot write checkpoint: ", problem));
}

// The file's tensors in file order: parameters, then "optim.<key>", on the
// host (the checksum and the file see the same bytes; a CUDA tensor is
// copied once).
absl::StatusOr<NamedTensors> FileTensors(const CheckpointContents& c) {
  NamedTensors out;
  out.reserve(c.params.size() + c.optimizer_state.size());
  auto add = [&](std::string name, const Tensor& t) -> absl::Status {
    if (!t.defined()) return Invalid(absl::StrCat("tensor ", json::Quote(name), " is undefined"));
    return RunCatching(absl::StrCat("cannot write checkpoint: copying tensor ", json::Quote(name), " to the host"),
                       [&] { out.emplace_back(std::move(name), t.To(Device::CPU()).Contiguous()); });
  };
  for (const auto& [name, t] : c.params) {
    if (name.empty() || absl::StartsWith(name, kOptimizerPrefix)) {
      return Invalid(absl::StrCat("parameter name ", json::Quote(name), " is empty or starts with \"",
                                  kOptimizerPrefix, "\" (reserved for optimizer state)"));
    }
    PSYNC_RETURN_IF_ERROR(add(name, t));
  }
  for (const auto& [key, t] : c.optimizer_state) {
    if (key.empty()) return Invalid("an optimizer state entry has an empty name");
    PSYNC_RETURN_IF_ERROR(add(absl::StrCat(kOptimizerPrefix, key), t));
  }
  return out;
}

// A directory we just created survives a crash only once its parent's entry
// is on disk (the file's rename is synced by AtomicFileWriter). Best effort,
// like AtomicFileWriter's own directory sync.
void SyncParentDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path path = std::filesystem::absolute(dir, ec).lexically_normal();
  if (ec) return;
  if (!path.has_filename()) path = path.parent_path();  // "d/" -> "d"
  const int fd = ::open(path.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// What goes into the file: the metadata (manifest and checksum) and the
// tensors, validated, on the host.
struct FileImage {
  Metadata metadata;
  NamedTensors tensors;
};

absl::StatusOr<FileImage> Encode(const CheckpointContents& contents) {
  if (contents.manifest.optimizer.empty() && !contents.optimizer_state.empty()) {
    return Invalid("optimizer state given but manifest.optimizer (its kind) is empty");
  }
  CheckpointManifest manifest = contents.manifest;
  manifest.psync_version = PsyncBuildVersion();
  FileImage image;
  PSYNC_ASSIGN_OR_RETURN(image.metadata, EncodeManifest(manifest));
  PSYNC_ASSIGN_OR_RETURN(image.tensors, FileTensors(contents));
  PSYNC_ASSIGN_OR_RETURN(image.metadata[kChecksumKey], ContentChecksum(image.metadata, image.tensors));
  return image;
}

// Atomic write, then (verify) a full read-back; the file's size in bytes.
absl::StatusOr<uint64_t> WriteImage(const std::string& path, const FileImage& image, bool verify,
                                    const std::function<absl::Status()>& may_commit = {}) {
  absl::Status refused;  // may_commit's error: the caller's own status, returned as is
  std::function<absl::Status()> check;
  if (may_commit) check = [&] { return refused = may_commit(); };
  absl::Status written = safetensors::Write(path, image.tensors, image.metadata, check);
  if (!refused.ok()) return refused;
  PSYNC_RETURN_IF_ERROR(Annotate(written, "writing checkpoint"));
  if (verify) {
    // Whatever was written must read back, weights-only files included.
    auto back = ReadCheckpoint(path, Need::kWeights);
    if (!back.ok()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", path, " was written but does not read back: ",
                                              back.status().message()));
    }
  }
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(size);
}

}  // namespace

absl::StatusOr<uint64_t> WriteCheckpointFile(const std::string& path, const CheckpointContents& contents,
                                             bool verify) {
  PSYNC_ASSIGN_OR_RETURN(FileImage image, Encode(contents));
  return WriteImage(path, image, verify);
}

absl::StatusOr<std::string> SerializeCheckpoint(const CheckpointContents& contents) {
  PSYNC_ASSIGN_OR_RETURN(FileImage image, Encode(contents));
  return safetensors::Serialize(image.tensors, image.metadata);
}

absl::StatusOr<WrittenCheckpoint> WriteCheckpoint(const std::string& dir, const CheckpointContents& contents,
                                                  const WriteOptions& options) {
  if (options.keep < 0) return Invalid(absl::StrCat("keep is ", options.keep, ", expected >= 0 (0 keeps all)"));
  if (dir.empty()) return Invalid("the checkpoint directory is empty");
  PSYNC_ASSIGN_OR_RETURN(FileImage image, Encode(contents));

  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec)) SyncParentDir(dir);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot create checkpoint directory ", dir, ": ", ec.message()));

  WrittenCheckpoint out;
  out.path = CheckpointPath(dir, contents.manifest.step);
  absl::StatusOr<uint64_t> bytes = WriteImage(out.path, image, options.verify, options.may_commit);
  if (!bytes.ok()) {
    if (bytes.status().code() != absl::StatusCode::kDataLoss) return bytes.status();
    return absl::DataLossError(absl::StrCat(bytes.status().message(), " (older checkpoints are kept)"));
  }
  out.bytes = *bytes;
  if (options.may_commit) {
    // Why again: retention deletes files the next generation may have
    // listed; once the run is no longer wanted, leave them all.
    if (absl::Status st = options.may_commit(); !st.ok()) {
      out.retention_errors.push_back(absl::StrCat("retention skipped: ", st.message()));
      return out;
    }
  }
  RetentionResult retention = ApplyRetention(dir, options.keep, contents.manifest.step);
  out.removed = std::move(retention.removed);
  out.retention_errors = std::move(retention.errors);
  return out;
}

}  // namespace psync::checkpoint
