// Reads GPT-2's vocab.json ({"token": id, ...}, ids 0..V-1 each once; keys
// spelled as gpt2_text.h says) from a stream, within file_limits.h: the
// JSON goes through nlohmann's SAX parser, fed by a reader that refuses
// what the parser would otherwise buffer without bound (a string or number
// past the limits, more bytes than the file may hold) and NUL bytes, and
// whose events build the vocabulary directly (no JSON tree): memory stays
// within a small multiple of the file's bounded size.
//
// Threads: stateless functions.
#pragma once

#include <cstdint>
#include <streambuf>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace psync::tokenizer {

struct Vocab {
  std::vector<std::string> tokens;                // id -> bytes
  absl::flat_hash_map<std::string, int32_t> ids;  // key (GPT-2's spelling) -> id
  // id -> a special token, which needs no merge: an added token (a key with
  // a character outside the byte table) or one written <...> (<|endoftext|>).
  std::vector<bool> special;
};

// InvalidArgument naming `source` (and the line and token where there is one).
absl::StatusOr<Vocab> ReadVocabJson(std::streambuf* in, const std::string& source);

}  // namespace psync::tokenizer
