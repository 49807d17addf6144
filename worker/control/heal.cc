#include "worker/control/heal.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "psync/common/status_macros.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/writer.h"

namespace psync::control {
namespace {

constexpr char kHeaderTag[] = "psync-heal/1";

// What precedes each chunk's payload (host byte order: both ends run the
// same psync build on the same architecture).
struct ChunkFrame {
  int64_t index = 0;
  uint32_t crc = 0;
  uint32_t bytes = 0;
};

uint32_t Crc32(absl::string_view bytes) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size());
  return static_cast<uint32_t>(crc);
}

std::string From(int source) { return absl::StrCat("rank ", source, "'s training state"); }

// "psync-heal/1 <total bytes> <chunks> <crc32 hex8>"
struct Header {
  uint64_t total = 0;
  int64_t chunks = 0;
  uint32_t crc = 0;
};

std::string EncodeHeader(const Header& h) {
  return absl::StrFormat("%s %d %d %08x", kHeaderTag, h.total, h.chunks, h.crc);
}

absl::StatusOr<Header> DecodeHeader(absl::string_view text, int source, size_t chunk_bytes) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ' ');
  Header h;
  if (parts.size() != 4 || parts[0] != kHeaderTag || !absl::SimpleAtoi(parts[1], &h.total) ||
      !absl::SimpleAtoi(parts[2], &h.chunks) || !absl::SimpleHexAtoi(parts[3], &h.crc) || h.chunks < 0 ||
      h.total > static_cast<uint64_t>(h.chunks) * chunk_bytes) {
    return absl::DataLossError(absl::StrCat(From(source), ": malformed header '", text.substr(0, 80),
                                            "' (every rank must call ShareTrainingState with the same options)"));
  }
  return h;
}

// The source's header; every rank takes part in the all-gather (the others
// send nothing).
absl::StatusOr<std::string> HeaderFromSource(comm::ProcessGroup& group, const std::string& mine, const HealOptions& o) {
  absl::StatusOr<std::vector<std::string>> all = group.AllgatherBytes(mine, o.timeout);
  if (!all.ok()) return Annotate(all.status(), absl::StrCat("receiving ", From(o.source), " (its header)"));
  if (static_cast<int>(all->size()) != group.size()) {
    return absl::InternalError(absl::StrCat("all-gather returned ", all->size(), " parts for ", group.size(), " ranks"));
  }
  return std::move((*all)[static_cast<size_t>(o.source)]);
}

}  // namespace

std::string FrameHealChunk(int64_t index, absl::string_view payload) {
  ChunkFrame f{index, Crc32(payload), static_cast<uint32_t>(payload.size())};
  std::string out(sizeof(f) + payload.size(), '\0');
  std::memcpy(out.data(), &f, sizeof(f));
  std::memcpy(out.data() + sizeof(f), payload.data(), payload.size());
  return out;
}

absl::StatusOr<absl::string_view> OpenHealChunk(absl::string_view message, int64_t index, int source_rank) {
  ChunkFrame f;
  if (message.size() < sizeof(f)) {
    return absl::DataLossError(absl::StrCat(From(source_rank), ": chunk ", index, " is not framed (", message.size(),
                                            " bytes)"));
  }
  std::memcpy(&f, message.data(), sizeof(f));
  if (f.index != index) {
    return absl::DataLossError(
        absl::StrCat(From(source_rank), ": chunk ", f.index, " arrived where chunk ", index, " was due"));
  }
  if (f.bytes > message.size() - sizeof(f)) {
    return absl::DataLossError(absl::StrCat(From(source_rank), ": chunk ", index, " says ", f.bytes,
                                            " bytes, but only ", message.size() - sizeof(f), " came"));
  }
  const absl::string_view payload = message.substr(sizeof(f), f.bytes);
  if (Crc32(payload) != f.crc) {
    return absl::DataLossError(absl::StrCat(From(source_rank), ": chunk ", index, " (", payload.size(),
                                            " bytes) does not match its CRC32"));
  }
  return payload;
}

absl::StatusOr<std::optional<checkpoint::CheckpointContents>> ShareTrainingState(
    comm::ProcessGroup& group, const HealOptions& o, const checkpoint::CheckpointContents* mine) {
  if (o.source < 0 || o.source >= group.size() || o.chunk_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("healing: source rank ", o.source, " of ", group.size(),
                                                   " ranks, chunks of ", o.chunk_bytes, " bytes"));
  }
  const bool sending = group.rank() == o.source;
  std::string bytes;  // the source's serialised state (sending) or what arrived (receiving)
  std::string header;
  if (sending) {
    if (mine == nullptr) return absl::InvalidArgumentError("healing: the source rank has no state to send");
    PSYNC_ASSIGN_OR_RETURN(bytes, checkpoint::SerializeCheckpoint(*mine));
    const int64_t chunks = static_cast<int64_t>((bytes.size() + o.chunk_bytes - 1) / o.chunk_bytes);
    header = EncodeHeader({bytes.size(), chunks, Crc32(bytes)});
  }
  PSYNC_ASSIGN_OR_RETURN(const std::string header_in, HeaderFromSource(group, header, o));
  PSYNC_ASSIGN_OR_RETURN(const Header h, DecodeHeader(header_in, o.source, o.chunk_bytes));
  if (!sending) bytes.reserve(h.total);
  // One buffer for every chunk (framed, in float32 words: a broadcast moves
  // bytes, never adds them); its pages are touched once, not per chunk. No
  // larger than the state: a small state does not pay for a whole chunk.
  const size_t largest = std::min<size_t>(o.chunk_bytes, h.total);
  const int64_t words = static_cast<int64_t>((sizeof(ChunkFrame) + largest + 3) / 4);
  Tensor buffer = Tensor::Empty({h.chunks > 0 ? words : 1}, kFloat32);
  for (int64_t k = 0; k < h.chunks; ++k) {
    const size_t first = static_cast<size_t>(k) * o.chunk_bytes;
    const size_t payload = std::min<size_t>(o.chunk_bytes, h.total - first);
    const int64_t used = static_cast<int64_t>((sizeof(ChunkFrame) + payload + 3) / 4);
    Tensor view = buffer.View(0, {used});
    if (sending) {
      // The frame, then the payload, straight into the buffer (FrameHealChunk's layout).
      const absl::string_view part = absl::string_view(bytes).substr(first, payload);
      const ChunkFrame f{k, Crc32(part), static_cast<uint32_t>(payload)};
      char* out = static_cast<char*>(view.raw_data());
      std::memcpy(out, &f, sizeof(f));
      std::memcpy(out + sizeof(f), part.data(), part.size());
    }
    absl::Status st = group.Broadcast(view, o.source, absl::StrCat("heal chunk ", k))->Wait(o.timeout);
    if (!st.ok()) return Annotate(st, absl::StrCat("receiving ", From(o.source), " (chunk ", k, " of ", h.chunks, ")"));
    if (sending) continue;
    PSYNC_ASSIGN_OR_RETURN(const absl::string_view got,
                           OpenHealChunk(absl::string_view(static_cast<const char*>(view.raw_data()),
                                                           static_cast<size_t>(used) * 4),
                                         k, o.source));
    bytes.append(got.data(), got.size());
  }
  if (sending) return std::nullopt;
  if (bytes.size() != h.total || Crc32(bytes) != h.crc) {
    return absl::DataLossError(absl::StrCat(From(o.source), ": ", bytes.size(), " bytes arrived of ", h.total,
                                            ", or they do not match the header's CRC32"));
  }
  PSYNC_ASSIGN_OR_RETURN(checkpoint::CheckpointContents state,
                         checkpoint::ParseCheckpoint(bytes, From(o.source), checkpoint::Need::kTrainingState));
  return std::optional<checkpoint::CheckpointContents>(std::move(state));
}

}  // namespace psync::control
