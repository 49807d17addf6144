// --data-format=auto: the format of a --data value from its name and first
// bytes (a gzip file is looked into):
//   ""                          synthetic
//   fashion-mnist[:DIR], A,B    idx
//   *.safetensors, or 8-byte length + '{'   rows
//   IDX magic 0x00000803 / 0x00000801 (plain or gzip)   idx
//   llm.c magic 20240520 (little-endian int32 0, not gzip)   tokens
// Anything else is InvalidArgument naming the file and suggesting
// --data-format=bytes (raw bytes are never guessed).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace psync::data {

absl::StatusOr<std::string> DetectFormat(const std::string& path, const std::string& flag = "--data");

}  // namespace psync::data
