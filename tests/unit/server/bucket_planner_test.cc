#include "server/bucket_planner.h"

#include <gtest/gtest.h>

namespace psync::server {
namespace {

std::vector<std::vector<int>> Params(const std::vector<PackedBucket>& b) {
  std::vector<std::vector<int>> out;
  for (const auto& x : b) out.push_back(x.params);
  return out;
}

TEST(BucketPlanner, FirstBucketUsesFirstCapOthersCap) {
  // sizes: 4 bytes each; first cap 8 -> 2 params, then cap 12 -> 3 params
  std::vector<int64_t> bytes(8, 4);
  auto b = PackBuckets({7, 6, 5, 4, 3, 2, 1, 0}, bytes, 8, 12);
  EXPECT_EQ(Params(b), (std::vector<std::vector<int>>{{7, 6}, {5, 4, 3}, {2, 1, 0}}));
  EXPECT_EQ(b[0].bytes, 8);
  EXPECT_EQ(b[1].bytes, 12);
}

TEST(BucketPlanner, LargeParamNeverSplitGetsOwnBucket) {
  std::vector<int64_t> bytes = {4, 100, 4, 4};
  auto b = PackBuckets({0, 1, 2, 3}, bytes, 8, 8);
  EXPECT_EQ(Params(b), (std::vector<std::vector<int>>{{0}, {1}, {2, 3}}));
}

TEST(BucketPlanner, OrderPreserved) {
  std::vector<int64_t> bytes = {1, 1, 1, 1};
  auto b = PackBuckets({2, 0, 3, 1}, bytes, 100, 100);
  EXPECT_EQ(Params(b), (std::vector<std::vector<int>>{{2, 0, 3, 1}}));
}

TEST(BucketPlanner, ReverseManifestOrder) {
  EXPECT_EQ(ReverseManifestOrder(3), (std::vector<int>{2, 1, 0}));
}

TEST(BucketPlanner, CompleteReadyOrderAppendsMissingAndRejectsBad) {
  auto ok = CompleteReadyOrder({1, 3}, 4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, (std::vector<int>{1, 3, 2, 0}));
  auto dup = CompleteReadyOrder({1, 1}, 4);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(dup.status().message()).find("repeats"), std::string::npos);
  EXPECT_FALSE(CompleteReadyOrder({4}, 4).ok());
  EXPECT_FALSE(CompleteReadyOrder({-1}, 4).ok());
  EXPECT_FALSE(CompleteReadyOrder({0, 1, 2, 3, 0}, 4).ok());
}

}  // namespace
}  // namespace psync::server
