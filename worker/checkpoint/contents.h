// CheckpointContents: everything a training checkpoint holds, in memory.
// The file format (one safetensors file) is described in README.md and
// docs/cli-contract.md; manifest.h maps the manifest to the file's
// "__metadata__", writer.h / reader.h move it to and from disk.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "psync/tensor/named_tensors.h"

namespace psync::checkpoint {

// The small description of a checkpoint (the file's metadata). Every map is
// opaque to this library: the trainer decides what it needs to resume.
struct CheckpointManifest {
  int64_t step = 0;  // optimizer steps completed; resuming runs step `step` next
  std::string model;  // --model kind ("mlp", "gpt", ...)
  // The model's configuration as flag-like key/values (model_config.h
  // encodes nn::ModelOptions), so a reader (psync-sample) can rebuild the
  // model from the checkpoint alone.
  std::map<std::string, std::string> model_config;
  // --optimizer kind ("sgd", "adamw"); empty: no optimizer state, a
  // weights-only checkpoint (psync-worker --save), which a run cannot resume from.
  std::string optimizer;
  // Where the data stream stands (e.g. epoch, cursor, shuffle seed).
  std::map<std::string, int64_t> data_position;
  // RNG states by name (e.g. "data": an engine's words), as the caller packs them.
  std::map<std::string, std::vector<uint64_t>> rng;
  int64_t world_size = 0;  // ranks that trained up to `step` (>= 1)
  std::string bucket_plan;  // JSON text as the caller serialized it, or empty
  // The psync build that wrote the file (build_info.h); filled in by
  // WriteCheckpoint, informational only.
  std::string psync_version;

  bool weights_only() const { return optimizer.empty(); }
};

struct CheckpointContents {
  CheckpointManifest manifest;
  // Model parameters under the model's own names (h.0.attn.c_attn.weight, ...),
  // in registration order. Names must not start with "optim.".
  NamedTensors params;
  // Optimizer::State() as it names it ("<param>.step", "<param>.exp_avg", ...);
  // stored in the file as "optim.<name>".
  NamedTensors optimizer_state;
};

}  // namespace psync::checkpoint
