#include "worker/checkpoint/weights.h"

#include <utility>

#include "common/status_macros.h"
#include "worker/checkpoint/reader.h"
#include "worker/safetensors/safetensors.h"

namespace psync::checkpoint {

absl::StatusOr<ModelWeights> ReadModelWeights(const std::string& path) {
  // One read of the file; the metadata says which kind it is.
  PSYNC_ASSIGN_OR_RETURN(safetensors::Contents file, safetensors::ReadWithMetadata(path));
  ModelWeights out;
  if (!IsCheckpoint(file.metadata)) {
    out.model = ModelFromMetadata(file.metadata);
    out.params = std::move(file.tensors);
    return out;
  }
  PSYNC_ASSIGN_OR_RETURN(CheckpointContents c, DecodeCheckpoint(std::move(file), path, Need::kWeights));
  out.model.kind = std::move(c.manifest.model);
  out.model.config = std::move(c.manifest.model_config);
  out.params = std::move(c.params);
  return out;
}

}  // namespace psync::checkpoint
