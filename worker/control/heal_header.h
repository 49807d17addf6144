// A heal's header (heal.h): what the source's training state holds, sent to
// every rank before any tensor byte, and how those bytes travel.
//
// The bytes travel as pieces, one broadcast each, planned from the entries
// alone so every rank cuts them alike (PlanHealPieces):
//   - a tensor of at least kPackBelow bytes goes straight from the source's
//     tensor into the receiver's, in windows of at most chunk_bytes (whole
//     elements): nothing is copied on either side but by the transport;
//   - smaller tensors (biases, norms, step counts) are packed, in order, into
//     a staging buffer of at most chunk_bytes, so a model's hundreds of small
//     tensors cost a few broadcasts, not hundreds.
// Each piece's CRC-32C is in the header; a receiver checks every piece as it
// lands and names the tensors of a damaged one.
//
// Encoding (host byte order: both ends run the same psync build on the same
// architecture): a length-prefixed tag, chunk_bytes, the manifest's
// metadata (key/value strings), the entries (name, dtype, dims), the pieces'
// CRCs, then the CRC-32C of everything before it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "psync/tensor/tensor.h"
#include "worker/checkpoint/manifest.h"

namespace psync::control {

// One tensor of the source's state, named as a checkpoint file names it: a
// parameter by its own name, an optimizer state entry as "optim.<key>".
struct HealEntry {
  std::string name;
  DType dtype = kFloat32;
  Shape shape;
  size_t nbytes() const;
};

// What one broadcast carries: `bytes` from `offset` of entry `entry`.
struct HealSlice {
  size_t entry = 0;
  size_t offset = 0;
  size_t bytes = 0;
};
struct HealPiece {
  std::vector<HealSlice> slices;  // one, unless packed
  size_t bytes = 0;               // the slices' sum
  bool packed = false;            // through the staging buffer (small tensors)
};

// Tensors with fewer bytes are packed; larger ones go straight.
inline constexpr size_t kPackBelow = size_t{64} << 10;
// The smallest chunk: room for any one element.
inline constexpr size_t kMinHealChunk = 8;

// The pieces, in order; empty tensors have none. chunk_bytes >= kMinHealChunk.
std::vector<HealPiece> PlanHealPieces(const std::vector<HealEntry>& entries, size_t chunk_bytes);

struct HealHeader {
  checkpoint::Metadata metadata;   // the manifest (checkpoint::EncodeManifest)
  std::vector<HealEntry> entries;  // parameters, then optimizer state
  uint64_t chunk_bytes = 0;
  std::vector<uint32_t> crcs;      // CRC-32C of each piece's bytes, PlanHealPieces' order
};

std::string EncodeHealHeader(const HealHeader& header);
// DataLoss naming `source` (e.g. "rank 2's training state") when `text` is
// not a whole, intact header: cut short, a bad tag or CRC, an unknown
// dtype, a negative or overflowing shape, a duplicate or empty name, or a
// CRC count that does not match the pieces its entries plan.
absl::StatusOr<HealHeader> DecodeHealHeader(absl::string_view text, const std::string& source);

// For errors: "piece 3 of 12 (tensor 'h.0.attn.c_attn.weight')", or the
// first few names of a packed piece.
std::string DescribeHealPiece(const HealHeader& header, const std::vector<HealPiece>& pieces, size_t index);

}  // namespace psync::control
