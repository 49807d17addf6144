#include "worker/control/heal.h"

#include <zlib.h>

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

// All ranks' parts of one all-gather; only the source's is used.
absl::StatusOr<std::string> FromSource(comm::ProcessGroup& group, const std::string& mine, const HealOptions& o,
                                       absl::string_view what) {
  absl::StatusOr<std::vector<std::string>> all = group.AllgatherBytes(mine, o.timeout);
  if (!all.ok()) return Annotate(all.status(), absl::StrCat("receiving ", From(o.source), " (", what, ")"));
  if (static_cast<int>(all->size()) != group.size()) {
    return absl::InternalError(absl::StrCat("all-gather returned ", all->size(), " parts for ", group.size(), " ranks"));
  }
  return std::move((*all)[static_cast<size_t>(o.source)]);
}

}  // namespace

std::string FrameHealChunk(int64_t index, absl::string_view payload) {
  return absl::StrCat(absl::StrFormat("%d %08x ", index, Crc32(payload)), payload);
}

absl::StatusOr<absl::string_view> OpenHealChunk(absl::string_view message, int64_t index, int source_rank) {
  const size_t first = message.find(' ');
  const size_t second = first == absl::string_view::npos ? first : message.find(' ', first + 1);
  int64_t got_index = -1;
  uint32_t crc = 0;
  if (second == absl::string_view::npos || !absl::SimpleAtoi(message.substr(0, first), &got_index) ||
      !absl::SimpleHexAtoi(message.substr(first + 1, second - first - 1), &crc)) {
    return absl::DataLossError(absl::StrCat(From(source_rank), ": chunk ", index, " is not framed (", message.size(),
                                            " bytes)"));
  }
  if (got_index != index) {
    return absl::DataLossError(
        absl::StrCat(From(source_rank), ": chunk ", got_index, " arrived where chunk ", index, " was due"));
  }
  const absl::string_view payload = message.substr(second + 1);
  if (Crc32(payload) != crc) {
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
  PSYNC_ASSIGN_OR_RETURN(const std::string header_in, FromSource(group, header, o, "its header"));
  PSYNC_ASSIGN_OR_RETURN(const Header h, DecodeHeader(header_in, o.source, o.chunk_bytes));
  if (!sending) bytes.reserve(h.total);
  for (int64_t k = 0; k < h.chunks; ++k) {
    // Why every rank joins every chunk: it is one all-gather of the group,
    // and each needs the same sequence of collectives.
    std::string message;
    if (sending) message = FrameHealChunk(k, absl::string_view(bytes).substr(static_cast<size_t>(k) * o.chunk_bytes, o.chunk_bytes));
    PSYNC_ASSIGN_OR_RETURN(const std::string in, FromSource(group, message, o, absl::StrCat("chunk ", k, " of ", h.chunks)));
    if (sending) continue;
    PSYNC_ASSIGN_OR_RETURN(const absl::string_view payload, OpenHealChunk(in, k, o.source));
    bytes.append(payload.data(), payload.size());
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
