#include "common/used_bitmap.h"

namespace psync::bitmap {

bool Get(const std::string& bm, int64_t i) {
  const size_t byte = static_cast<size_t>(i / 8);
  if (i < 0 || byte >= bm.size()) return false;
  return (static_cast<unsigned char>(bm[byte]) >> (i % 8)) & 1u;
}

std::string Pack(const std::vector<uint8_t>& flags) {
  std::string out(static_cast<size_t>(BytesFor(static_cast<int64_t>(flags.size()))), '\0');
  for (size_t p = 0; p < flags.size(); ++p) {
    if (flags[p] != 0) out[p / 8] = static_cast<char>(static_cast<unsigned char>(out[p / 8]) | (1u << (p % 8)));
  }
  return out;
}

std::vector<uint8_t> Unpack(const std::string& bm, size_t n) {
  std::vector<uint8_t> out(n, 0);
  for (size_t p = 0; p < n && p / 8 < bm.size(); ++p) {
    out[p] = (static_cast<unsigned char>(bm[p / 8]) >> (p % 8)) & 1u;
  }
  return out;
}

}  // namespace psync::bitmap
