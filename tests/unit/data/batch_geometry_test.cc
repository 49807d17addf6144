// Elastic worlds (batch_geometry.h, AccumulateForWorld): the same global
// batch over fewer ranks, in more micro-batches where a rank's share would
// exceed the micro-batch the job was planned with, and a clear refusal when
// the batch does not split over the world.
#include "worker/data/batch_geometry.h"

#include <gtest/gtest.h>

namespace psync::data {
namespace {

TEST(AccumulateForWorld, TheSameMicroBatchInMoreStepsOnFewerRanks) {
  EXPECT_EQ(*AccumulateForWorld(64, 1, 4, 4), 1) << "the planned world: as flagged";
  EXPECT_EQ(*AccumulateForWorld(64, 1, 4, 2), 2) << "half the ranks: each share doubles, in 2 micro-batches of 16";
  EXPECT_EQ(*AccumulateForWorld(64, 2, 4, 2), 4);
  EXPECT_EQ(*AccumulateForWorld(64, 1, 4, 1), 4);
  EXPECT_EQ(*AccumulateForWorld(48, 1, 4, 3), 2) << "48/3 = 16 > 12: 2 micro-batches of 8";
  EXPECT_EQ(*AccumulateForWorld(64, 1, 0, 2), 1) << "no planned world: as flagged";
  EXPECT_EQ(*AccumulateForWorld(64, 1, 2, 4), 1) << "a larger world: shares shrink, M stays";
}

TEST(AccumulateForWorld, ABatchThatDoesNotSplitIsNamed) {
  absl::StatusOr<int64_t> m = AccumulateForWorld(8, 1, 4, 3);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(m.status().message()).find("--global-batch 8 cannot be split over 3 ranks"), std::string::npos)
      << m.status();
  EXPECT_FALSE(AccumulateForWorld(8, 1, 4, 0).ok());
}

}  // namespace
}  // namespace psync::data
