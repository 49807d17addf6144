#include "common/used_bitmap.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace psync::bitmap {
namespace {

TEST(UsedBitmap, PackAndUnpackRoundTripLsbFirst) {
  const std::vector<uint8_t> flags = {1, 0, 0, 1, 1, 0, 0, 0, 1, 1};
  const std::string packed = Pack(flags);
  ASSERT_EQ(packed.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(packed[0]), 0x19);
  EXPECT_EQ(static_cast<unsigned char>(packed[1]), 0x03);
  EXPECT_EQ(Unpack(packed, 10), flags);
  EXPECT_EQ(Unpack("", 3), (std::vector<uint8_t>{0, 0, 0})) << "short bitmaps read as zeros";
}

TEST(UsedBitmap, NonZeroBytesAreSetAndGetReadsOneBit) {
  const std::string packed = Pack({7, 0, 255});
  EXPECT_EQ(packed, std::string(1, '\x05'));
  EXPECT_TRUE(Get(packed, 0));
  EXPECT_FALSE(Get(packed, 1));
  EXPECT_TRUE(Get(packed, 2));
  EXPECT_FALSE(Get(packed, 8)) << "beyond the end reads false";
  EXPECT_FALSE(Get(packed, -1));
  EXPECT_EQ(BytesFor(0), 0);
  EXPECT_EQ(BytesFor(8), 1);
  EXPECT_EQ(BytesFor(9), 2);
}

}  // namespace
}  // namespace psync::bitmap
