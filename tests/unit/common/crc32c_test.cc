// Crc32c (common/crc32c.h): the standard check values, continuation across
// any split, and the hardware path equal to the table on every length and
// alignment.
#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace psync {
namespace {

TEST(Crc32c, StandardCheckValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(Crc32cPortable("123456789", 9), 0xe3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  const std::string zeros(32, '\0');  // RFC 3720, B.4
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  const std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62a8ab43u);
}

TEST(Crc32c, ContinuesAcrossAnySplitAndMatchesTheTableAtEveryAlignment) {
  std::string bytes(301, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131 + 7) & 0xff);
  const uint32_t whole = Crc32c(bytes.data(), bytes.size());
  EXPECT_EQ(whole, Crc32cPortable(bytes.data(), bytes.size()));
  for (size_t cut = 0; cut <= bytes.size(); cut += 7) {
    EXPECT_EQ(Crc32c(bytes.data() + cut, bytes.size() - cut, Crc32c(bytes.data(), cut)), whole) << "cut " << cut;
  }
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t n = 0; n + offset <= 40; ++n) {
      EXPECT_EQ(Crc32c(bytes.data() + offset, n), Crc32cPortable(bytes.data() + offset, n))
          << "offset " << offset << ", " << n << " bytes";
    }
  }
}

}  // namespace
}  // namespace psync
