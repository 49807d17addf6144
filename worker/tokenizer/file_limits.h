// What psync reads in a tokenizer's files (gpt2_files.h), and how errors
// quote them. The limits are checked before and while reading, so a broken
// or hostile file (1 GiB of merges.txt, a 64 MiB line, a million tokens too
// many, /dev/zero) is refused at once, in bounded memory, with one short
// error line; files within the limits are read in memory bounded by them.
// GPT-2's own files are far inside: vocab.json about 1 MB and 50,257
// tokens, merges.txt about 456 kB and 50,000 merges.
//
// Threads: constants and a stateless function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace psync::tokenizer {

// A file's size (stat before reading, and counted while reading).
inline constexpr int64_t kMaxVocabFileBytes = int64_t{64} << 20;
inline constexpr int64_t kMaxMergesFileBytes = int64_t{64} << 20;
// Tokens in vocab.json, and merges (lines) in merges.txt.
inline constexpr int64_t kMaxVocabTokens = 1'000'000;
inline constexpr int64_t kMaxMerges = 1'000'000;
// A token's bytes (decoded from its vocab.json key).
inline constexpr size_t kMaxTokenBytes = 1024;
// A line of merges.txt: two tokens of kMaxTokenBytes, each byte written as
// up to 2 bytes of UTF-8, and a space.
inline constexpr size_t kMaxMergesLineBytes = 4096;
// At most this many bytes of an offending line or token appear in an error.
inline constexpr size_t kExcerptBytes = 40;

// `text` as a JSON string literal for an error message: at most
// kExcerptBytes of it (fewer when escapes such as \u0000 would make the
// quote long, never cutting a UTF-8 character), then "... (N bytes)" when
// cut: "\u0000\u0000\u0000"... (67108864 bytes). `prefix`: `text` is the
// start of something longer (of unknown size): "..." always, and no size.
std::string Excerpt(absl::string_view text, bool prefix = false);

}  // namespace psync::tokenizer
