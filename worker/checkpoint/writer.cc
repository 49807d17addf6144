#include "worker/checkpoint/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/status_macros.h"
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
    try {
      out.emplace_back(std::move(name), t.To(Device::CPU()).Contiguous());
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("cannot write checkpoint: copying tensor ", json::Quote(name),
                                              " to the host: ", e.what()));
    }
    return absl::OkStatus();
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

}  // namespace

absl::StatusOr<WrittenCheckpoint> WriteCheckpoint(const std::string& dir, const CheckpointContents& contents,
                                                  const WriteOptions& options) {
  if (options.keep < 0) return Invalid(absl::StrCat("keep is ", options.keep, ", expected >= 0 (0 keeps all)"));
  if (dir.empty()) return Invalid("the checkpoint directory is empty");
  if (contents.manifest.optimizer.empty() && !contents.optimizer_state.empty()) {
    return Invalid("optimizer state given but manifest.optimizer (its kind) is empty");
  }
  CheckpointManifest manifest = contents.manifest;
  manifest.psync_version = PsyncBuildVersion();
  PSYNC_ASSIGN_OR_RETURN(Metadata metadata, EncodeManifest(manifest));
  PSYNC_ASSIGN_OR_RETURN(NamedTensors tensors, FileTensors(contents));
  PSYNC_ASSIGN_OR_RETURN(metadata[kChecksumKey], ContentChecksum(metadata, tensors));

  std::error_code ec;
  if (std::filesystem::create_directories(dir, ec)) SyncParentDir(dir);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot create checkpoint directory ", dir, ": ", ec.message()));

  WrittenCheckpoint out;
  out.path = CheckpointPath(dir, manifest.step);
  PSYNC_RETURN_IF_ERROR(Annotate(safetensors::Write(out.path, tensors, metadata), "writing checkpoint"));
  const auto size = std::filesystem::file_size(out.path, ec);
  out.bytes = ec ? 0 : static_cast<uint64_t>(size);

  if (options.verify) {
    auto back = ReadCheckpoint(out.path);
    if (!back.ok()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", out.path,
                                              " was written but does not read back; older checkpoints are kept: ",
                                              back.status().message()));
    }
  }
  RetentionResult retention = ApplyRetention(dir, options.keep, manifest.step);
  out.removed = std::move(retention.removed);
  out.retention_errors = std::move(retention.errors);
  return out;
}

}  // namespace psync::checkpoint
