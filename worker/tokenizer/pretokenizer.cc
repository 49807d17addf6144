#include "worker/tokenizer/pretokenizer.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace psync::tokenizer {
namespace {

struct ClassRange {
  uint32_t first, last;
  CharClass cls;
};

constexpr ClassRange kRanges[] = {
#include "worker/tokenizer/unicode_classes.inc"
};

// ASCII by table: most text is ASCII, and this is the inner loop.
constexpr std::array<CharClass, 128> AsciiClasses() {
  std::array<CharClass, 128> t{};
  for (uint32_t c = 0; c < 128; ++c) {
    t[c] = CharClass::kOther;
    for (const ClassRange& r : kRanges) {
      if (c >= r.first && c <= r.last) t[c] = r.cls;
    }
  }
  return t;
}
constexpr std::array<CharClass, 128> kAscii = AsciiClasses();

inline bool Continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

CharClass ClassOf(uint32_t cp) {
  if (cp < 128) return kAscii[cp];
  // The last range starting at or before cp.
  const ClassRange* it = std::upper_bound(std::begin(kRanges), std::end(kRanges), cp,
                                          [](uint32_t v, const ClassRange& r) { return v < r.first; });
  if (it == std::begin(kRanges)) return CharClass::kOther;
  --it;
  return cp <= it->last ? it->cls : CharClass::kOther;
}

TextUnit UnitAt(absl::string_view text, size_t pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data()) + pos;
  const size_t n = text.size() - pos;
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return {kAscii[b0], 1};
  // Strict UTF-8 (RFC 3629): the second byte's range depends on the first.
  int len = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return {CharClass::kOther, 1};
  }
  if (n < static_cast<size_t>(len) || p[1] < lo || p[1] > hi) return {CharClass::kOther, 1};
  uint32_t cp = b0 & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    if (!Continuation(p[i])) return {CharClass::kOther, 1};
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  return {ClassOf(cp), len};
}

namespace {

// The end of the run of units of class `cls` starting at `pos`.
size_t RunEnd(absl::string_view text, size_t pos, CharClass cls) {
  while (pos < text.size()) {
    const TextUnit u = UnitAt(text, pos);
    if (u.cls != cls) break;
    pos += static_cast<size_t>(u.length);
  }
  return pos;
}

// 's 't 're 've 'm 'll 'd (case-sensitive, as GPT-2's pattern): its length, or 0.
size_t ContractionLength(absl::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char c = text[pos + 1];
  if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  if (pos + 2 >= text.size()) return 0;
  const absl::string_view two = text.substr(pos + 1, 2);
  return two == "re" || two == "ve" || two == "ll" ? 3 : 0;
}

}  // namespace

size_t NextPiece(absl::string_view text, size_t pos) {
  if (size_t n = ContractionLength(text, pos); n > 0) return pos + n;
  const TextUnit u = UnitAt(text, pos);
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a
  // run of one class.
  if (text[pos] == ' ' && pos + 1 < text.size()) {
    const TextUnit next = UnitAt(text, pos + 1);
    if (next.cls != CharClass::kSpace) return RunEnd(text, pos + 1 + next.length, next.cls);
  } else if (u.cls != CharClass::kSpace) {
    return RunEnd(text, pos + u.length, u.cls);
  }
  // Whitespace. `\s+(?!\S)`: the run up to the end of the text, or all of it
  // but its last unit when a non-space follows (that unit then starts the
  // next piece, e.g. " word"); a single unit before a non-space is `\s+`.
  size_t end = pos, last = pos;
  while (end < text.size()) {
    const TextUnit w = UnitAt(text, end);
    if (w.cls != CharClass::kSpace) break;
    last = end;
    end += static_cast<size_t>(w.length);
  }
  if (end == text.size() || last == pos) return end;
  return last;
}

size_t SafeCut(absl::string_view text, size_t pos) {
  for (size_t i = std::max<size_t>(pos, 1); i < text.size(); ++i) {
    if (text[i] != '\n') continue;
    const auto prev = static_cast<unsigned char>(text[i - 1]);
    if (prev < 0x80 && kAscii[prev] != CharClass::kSpace) return i;
  }
  return text.size();
}

}  // namespace psync::tokenizer
