// How GPT-2's files spell a token's bytes: bytes_to_unicode of GPT-2's
// encoder.py, one character per byte (printable bytes as themselves, the
// rest as U+0100 onwards: a space is "Ġ"). A vocab.json key with a character
// outside that table (an added token, e.g. a chat marker) stands for that
// character's own UTF-8 bytes.
//
// Threads: stateless functions (the tables are built once, thread-safely).
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace psync::tokenizer {

// GPT-2's bytes_to_unicode: byte -> code point, and the text of `bytes` through it.
uint32_t ByteToCodePoint(uint8_t byte);
std::string BytesToGpt2Text(absl::string_view bytes);

// A key's bytes: a table character is its byte, any other character its own
// UTF-8; *added (when given) says whether there was such a character.
// `text` is valid UTF-8 (vocab.json's JSON parser checked it).
std::string Gpt2TextToBytes(absl::string_view text, bool* added = nullptr);

// The key for an added token's bytes: each valid UTF-8 character whose code
// point is not in the table as itself, the other bytes through the table;
// Gpt2TextToBytes gives the bytes back, and says "added" again when there
// was such a character. BytesToGpt2Text when there was none.
std::string AddedTokenText(absl::string_view bytes);

}  // namespace psync::tokenizer
