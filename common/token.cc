#include "common/token.h"

namespace psync {

bool TokenEquals(absl::string_view given, absl::string_view secret) {
  // Walk `given` whole; compare with the secret cycled to its length (an
  // empty secret compares with zero bytes). A length mismatch is folded
  // into the same accumulator instead of returning early.
  unsigned char diff = given.size() != secret.size() ? 1 : 0;
  diff |= secret.empty() ? 1 : 0;
  const size_t n = secret.size();
  for (size_t i = 0; i < given.size(); ++i) {
    const unsigned char s = n ? static_cast<unsigned char>(secret[i % n]) : 0;
    diff |= static_cast<unsigned char>(given[i]) ^ s;
  }
  // Keep the compiler from turning the loop into an early-exit compare.
  volatile unsigned char result = diff;
  return result == 0;
}

bool BearerTokenMatches(absl::string_view header, absl::string_view secret) {
  constexpr absl::string_view kPrefix = "Bearer ";
  if (header.substr(0, kPrefix.size()) != kPrefix) return false;
  return TokenEquals(header.substr(kPrefix.size()), secret);
}

}  // namespace psync
