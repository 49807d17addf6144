#include "worker/tokenizer/gpt2_text.h"

#include <algorithm>
#include <array>

#include "absl/container/flat_hash_map.h"

namespace psync::tokenizer {
namespace {

// bytes_to_unicode of GPT-2's encoder.py: '!'..'~', '¡'..'¬', '®'..'ÿ' stand
// for themselves; the other 68 bytes, in order, for U+0100, U+0101, ...
std::array<uint32_t, 256> MakeByteTable() {
  std::array<uint32_t, 256> t{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t[b] = printable ? b : next++;
  }
  return t;
}
const std::array<uint32_t, 256>& ByteTable() {
  static const std::array<uint32_t, 256> table = MakeByteTable();
  return table;
}

// Code point -> byte for the table's 256 code points.
const absl::flat_hash_map<uint32_t, uint8_t>& InverseTable() {
  static const auto* inverse = [] {
    auto* m = new absl::flat_hash_map<uint32_t, uint8_t>();
    for (int b = 0; b < 256; ++b) (*m)[ByteTable()[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);
    return m;
  }();
  return *inverse;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The length of the valid UTF-8 character at s[i] (no overlong forms,
// surrogates or code points past U+10FFFF), with *cp; 0 when invalid.
size_t ValidUtf8At(absl::string_view s, size_t i, uint32_t* cp) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  const size_t len = b0 < 0x80 ? 1 : b0 < 0xC2 ? 0 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : b0 < 0xF5 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  uint32_t c = len == 1 ? b0 : b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cp = c;
  return len;
}

}  // namespace

uint32_t ByteToCodePoint(uint8_t byte) { return ByteTable()[byte]; }

std::string BytesToGpt2Text(absl::string_view bytes) {
  std::string out;
  for (char c : bytes) AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(c)), &out);
  return out;
}

std::string Gpt2TextToBytes(absl::string_view text, bool* added) {
  std::string out;
  if (added != nullptr) *added = false;
  for (size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    const size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (size_t k = 1; k < len && i + k < text.size(); ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3F);
    auto it = InverseTable().find(cp);
    if (it != InverseTable().end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out.append(text.data() + i, std::min(len, text.size() - i));
      if (added != nullptr) *added = true;
    }
    i += len;
  }
  return out;
}

std::string AddedTokenText(absl::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    uint32_t cp = 0;
    const size_t len = ValidUtf8At(bytes, i, &cp);
    if (len > 0 && !InverseTable().contains(cp)) {
      out.append(bytes.data() + i, len);
      i += len;
    } else {
      AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(bytes[i])), &out);
      ++i;
    }
  }
  return out;
}

}  // namespace psync::tokenizer
