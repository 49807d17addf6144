#include "worker/checkpoint/weights.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "worker/checkpoint/hf_gpt2.h"
#include "worker/checkpoint/reader.h"
#include "worker/safetensors/safetensors.h"

namespace psync::checkpoint {

absl::StatusOr<WeightsFormat> ParseWeightsFormat(const std::string& text) {
  if (text == "auto") return WeightsFormat::kAuto;
  if (text == "psync") return WeightsFormat::kPsync;
  if (text == "hf") return WeightsFormat::kHf;
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not a weights format (auto, psync, or hf: a GPT-2 in Hugging Face's layout)"));
}

absl::StatusOr<ModelWeights> ReadModelWeights(const std::string& path, WeightsFormat format) {
  // One read of the file; the metadata (and for HF files, the layout) says
  // which kind it is.
  PSYNC_ASSIGN_OR_RETURN(safetensors::Contents file, safetensors::ReadWithMetadata(path));
  ModelWeights out;
  if (!IsCheckpoint(file.metadata)) {
    if (format == WeightsFormat::kHf || (format == WeightsFormat::kAuto && LooksLikeHfGpt2(file.tensors))) {
      PSYNC_ASSIGN_OR_RETURN(out.params, FromHfGpt2(std::move(file.tensors), file.metadata, path, &out.model));
      out.hf_layout = true;
      return out;
    }
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
