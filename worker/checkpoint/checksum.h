// The content checksum of a checkpoint: CRC-32 (zlib) over a canonical
// serialization of everything the file says, so a torn or corrupted file is
// rejected even where the damage still parses (a digit of a metadata value,
// a name, a tensor byte):
//
//   "psync-checkpoint-crc-v1"
//   per metadata entry except "checksum", in key order: len(key) key len(value) value
//   per tensor, in file order: len(name) name dtype-name ndim dims... nbytes bytes
//
// (lengths and dims as 8-byte little-endian). Stored as "crc32:<8 lowercase
// hex digits>" under the metadata key "checksum".
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "worker/checkpoint/contents.h"
#include "worker/checkpoint/manifest.h"

namespace psync::checkpoint {

// `tensors` in the order they are (or will be) in the file. Tensors that are
// not contiguous CPU tensors are copied to the host first. Internal error if
// a copy fails.
absl::StatusOr<std::string> ContentChecksum(const Metadata& metadata, const NamedTensors& tensors);

}  // namespace psync::checkpoint
