#include "worker/tokenizer/file_limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/json.h"

namespace psync::tokenizer {

std::string Excerpt(absl::string_view text, bool prefix) {
  // The quote stays under about 2 * kExcerptBytes characters: each halving
  // of the prefix halves the escapes in it.
  size_t n = std::min(text.size(), kExcerptBytes);
  std::string quoted;
  for (;; n /= 2) {
    // Back off to the start of a UTF-8 character (a continuation byte is
    // 10xxxxxx; a character has at most 3 of them).
    for (int k = 0; k < 3 && n > 0 && n < text.size() && (static_cast<uint8_t>(text[n]) & 0xC0) == 0x80; ++k) --n;
    quoted = json::Quote(text.substr(0, n));
    if (quoted.size() <= 2 * kExcerptBytes || n == 0) break;
  }
  if (prefix) {
    quoted += "...";
  } else if (n < text.size()) {
    absl::StrAppend(&quoted, "... (", text.size(), " bytes)");
  }
  return quoted;
}

}  // namespace psync::tokenizer
