// GPT-2's pre-tokenization, written by hand: the text is cut into the pieces
// that the regex of GPT-2's encoder.py finds,
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// tried in that order at each position, with the `regex` module's classes
// (\p{L} letters, \p{N} numbers, \s Unicode White_Space), which
// unicode_classes.inc lists (generated from that module by
// gen_unicode_classes.py). No regex library: none in Debian offers \p{L}
// with this backtracking for free, and a scanner is several times faster.
//
// Bytes, not code points, are the input: valid UTF-8 is decoded strictly
// (no overlong forms, surrogates or values past U+10FFFF); every byte of an
// invalid sequence is a one-byte unit of class "other" (it joins a run of
// punctuation), so any byte string is cut into pieces that concatenate back
// to it exactly (the byte-level BPE round trip).
//
// Threads: stateless functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace psync::tokenizer {

enum class CharClass : uint8_t { kOther, kLetter, kNumber, kSpace };

// The class of one code point (anything past U+10FFFF: kOther).
CharClass ClassOf(uint32_t code_point);

// One unit of text: a code point's UTF-8 bytes, or one invalid byte.
struct TextUnit {
  CharClass cls;
  int length;  // 1..4 bytes
};
// The unit at text[pos] (pos < text.size()).
TextUnit UnitAt(absl::string_view text, size_t pos);

// The end of the piece that starts at `pos` (pos < text.size(); the result
// is > pos). Pieces are read left to right: NextPiece(text, 0), then from its
// end, and so on.
size_t NextPiece(absl::string_view text, size_t pos);

// A position >= pos where a piece surely starts, whatever follows it: the
// first '\n' after an ASCII character that is not whitespace (the piece
// before cannot hold the newline, and no piece looks back), or text.size().
// Text cut there encodes in parts exactly as in one go (psync-tokenize
// encodes large files in chunks this way).
size_t SafeCut(absl::string_view text, size_t pos);

// Calls f(piece) for every piece of `text`, in order.
template <typename F>
void ForEachPiece(absl::string_view text, F&& f) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = NextPiece(text, pos);
    f(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace psync::tokenizer
