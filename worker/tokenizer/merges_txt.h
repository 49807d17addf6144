// Reads GPT-2's merges.txt ("#version: 0.2", then "left right" per line,
// lowest rank first) from a stream, line by line within file_limits.h: an
// over-long line is refused after its first kMaxMergesLineBytes bytes, so
// memory holds one bounded line and the merges.
//
// Threads: stateless functions.
#pragma once

#include <cstdint>
#include <streambuf>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "worker/tokenizer/bpe_tokenizer.h"

namespace psync::tokenizer {

// `ids`: vocab.json's keys -> ids (vocab_json.h). InvalidArgument naming
// `source`, the line and (an excerpt of) the line or the missing token.
absl::StatusOr<std::vector<MergeRule>> ReadMergesTxt(std::streambuf* in, const std::string& source,
                                                     const absl::flat_hash_map<std::string, int32_t>& ids);

}  // namespace psync::tokenizer
