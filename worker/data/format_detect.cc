#include "worker/data/format_detect.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"
#include "worker/data/fashion_mnist.h"
#include "worker/data/gzip_reader.h"
#include "worker/data/idx_file.h"
#include "worker/data/source_error.h"
#include "worker/data/token_file.h"
#include "worker/data/token_stream.h"

namespace psync::data {

absl::StatusOr<std::string> DetectFormat(const std::string& path, const std::string& flag) {
  if (path.empty()) return std::string("synthetic");
  if (IsFashionMnistName(path) || absl::StrContains(path, ',')) return std::string("idx");
  if (absl::EndsWith(path, ".safetensors")) return std::string("rows");
  if (IsShardSet(path)) {
    // A set of shards is llm.c token files; the first one says whether it is.
    PSYNC_ASSIGN_OR_RETURN(std::vector<std::string> shards, ListShards(path, flag));
    absl::StatusOr<std::string> first = DetectFormat(shards.front(), absl::StrCat(flag, " shard"));
    if (first.ok() && *first == "tokens") return first;
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": its first shard ", shards.front(),
                                                   " is not an llm.c token file (magic ", kLlmcMagic,
                                                   "); a directory or glob of shards is read as llm.c token files"));
  }
  bool compressed = false;
  absl::StatusOr<std::string> head = ReadHead(path, 16, &compressed);
  if (!head.ok()) return WithFlag(head.status(), flag);
  const auto* b = reinterpret_cast<const uint8_t*>(head->data());
  const size_t n = head->size();
  if (n >= 4) {
    const uint32_t big = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    if (big == IdxUbyteMagic(3) || big == IdxUbyteMagic(1)) return std::string("idx");
    const uint32_t little = uint32_t{b[0]} | (uint32_t{b[1]} << 8) | (uint32_t{b[2]} << 16) | (uint32_t{b[3]} << 24);
    if (!compressed && little == static_cast<uint32_t>(kLlmcMagic)) return std::string("tokens");
  }
  if (!compressed && n >= 9 && b[8] == '{') return std::string("rows");  // safetensors: u64 header length, then JSON
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " ", path, ": format not recognised", compressed ? " (gzip-compressed, but not IDX inside)" : "",
      ": expected a .safetensors file, an IDX file (magic 0x00000803 or 0x00000801) or an llm.c token file (magic ",
      kLlmcMagic, "); to train on its raw bytes as tokens pass --data-format=bytes",
      compressed ? " (after gunzip: token files are memory-mapped)" : ""));
}

}  // namespace psync::data
