// The manifest <-> the safetensors "__metadata__" map (string -> string).
//
//   format          "psync-checkpoint"
//   format_version  "1"
//   step            optimizer steps completed, e.g. "1200"
//   model           --model kind;  model.<key>: its configuration (model_config.h)
//   optimizer       --optimizer kind ("" when the file holds no optimizer state)
//   data.<key>      data position entries, decimal int64
//   rng.<name>      an RNG state: decimal uint64 words joined by ","
//   world_size      decimal, >= 1
//   bucket_plan     JSON text, or ""
//   psync_version   the writing build (informational)
//   checksum        "crc32:<8 hex digits>" (checksum.h; added by the writer)
//
// Keys of the maps (<key>, <name>) are non-empty and use [A-Za-z0-9_.-].
// Numbers are in canonical decimal (no sign on positives, no leading zeros,
// no spaces), so every value has one spelling.
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/checkpoint/contents.h"

namespace psync::checkpoint {

using Metadata = std::map<std::string, std::string>;

inline constexpr char kChecksumKey[] = "checksum";

// Validates `manifest` (step >= 0, world_size >= 1, model named, map keys
// well-formed, bucket_plan empty or JSON) and encodes it, without the
// checksum. InvalidArgument names the field.
absl::StatusOr<Metadata> EncodeManifest(const CheckpointManifest& manifest);

// Decodes and validates the metadata of checkpoint `source` (named in every
// error, with the key): every required key present, values well-formed, no
// unknown keys (a "checksum" key is allowed and ignored here).
// FailedPrecondition for a file of another format version, InvalidArgument
// otherwise.
absl::StatusOr<CheckpointManifest> DecodeManifest(const Metadata& metadata, const std::string& source);

}  // namespace psync::checkpoint
