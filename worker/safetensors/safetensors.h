// Reading and writing tensors in the safetensors format
// (https://github.com/huggingface/safetensors), so psync checkpoints load in
// PyTorch (safetensors.torch.load_file) and PyTorch state_dicts saved with
// safetensors load in psync (--init).
//
// Layout of a file:
//   8 bytes      N, the header length, unsigned little-endian
//   N bytes      JSON header: {"__metadata__": {str: str},            (optional)
//                              "<name>": {"dtype": "F32", "shape": [d0, ...],
//                                         "data_offsets": [begin, end]}, ...}
//                padded with trailing spaces so that 8 + N is a multiple of 8
//   rest         the data section; each tensor's bytes are [begin, end)
//                relative to its start, row-major, little-endian
//
// Names and shapes follow PyTorch's state_dict ("0.weight": [out, in], ...).
//
// Validation is strict and mirrors the reference implementation: the header
// length must fit the file and be <= 100 MB; the header must be a JSON object
// without duplicate keys; every entry needs dtype, shape and data_offsets and
// nothing else; the byte range must match the shape exactly; and the ranges,
// sorted by offset, must cover the data section exactly (no gaps, no overlap,
// no trailing bytes). Dtypes: F32, F64, BF16, F16, I64 (psync's tensor
// dtypes); others are refused with the name of the tensor. Every error is InvalidArgument
// (NotFound / Internal for I/O) and its message names the file, the problem
// and, where there is one, the tensor. Corrupt input never crashes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "psync/tensor/named_tensors.h"
#include "psync/tensor/tensor.h"

namespace psync::safetensors {

// The header's dtype tags ("F32", "F64", "BF16", "F16", "I64") <-> psync dtypes.
const char* DTypeTag(DType dtype);
absl::StatusOr<DType> DTypeFromTag(absl::string_view name);

struct Contents {
  NamedTensors tensors;                         // ordered by data offset
  std::map<std::string, std::string> metadata;  // the "__metadata__" entry
};

// Largest header accepted, as in the reference implementation.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Reads `path` into CPU tensors, in data-offset order. Reads the header, then
// each tensor's bytes straight into its storage (no whole-file copy).
absl::StatusOr<NamedTensors> Read(const std::string& path);
absl::StatusOr<Contents> ReadWithMetadata(const std::string& path);

// Parses a whole file held in memory; `source_name` is used in error messages
// in place of a path (for the fuzzer and tests).
absl::StatusOr<NamedTensors> Parse(absl::string_view bytes, const std::string& source_name);
absl::StatusOr<Contents> ParseWithMetadata(absl::string_view bytes,
                                                                 const std::string& source_name);

// Writes `tensors` (in the given order) and `metadata` to `path` atomically:
// a temporary file in the same directory is written, fsync'ed and renamed
// over `path`, then the directory is fsync'ed, so a crash leaves either the
// old file or the complete new one. CUDA tensors are copied to the host.
// Names must be unique, non-empty and not "__metadata__"; tensors defined.
// `before_rename`: AtomicFileWriter::Commit's (an error cancels the write).
absl::Status Write(const std::string& path, const NamedTensors& tensors,
                   const std::map<std::string, std::string>& metadata = {},
                   const std::function<absl::Status()>& before_rename = {});

// The exact bytes Write would write (for tests and small files).
absl::StatusOr<std::string> Serialize(const NamedTensors& tensors,
                                                 const std::map<std::string, std::string>& metadata = {});

}  // namespace psync::safetensors
