// The coordinator's bucket plans (server/bucket_planner.h). The packing
// itself is include/psync/common/bucket_packer.h's (tests/unit/common/bucket_packer_test.cc);
// that the coordinator and the workers agree is
// tests/integration/coordinator/bucket_plan_agreement_test.cc.
#include "server/bucket_planner.h"

#include <gtest/gtest.h>

namespace psync::server {
namespace {

TEST(BucketPlanner, PlanBucketsListsPackedBucketsWithTheirBytes) {
  std::vector<size_t> bytes = {4, 4, 100, 4};
  v1::BucketPlan plan = PlanBuckets(1, 7, ReverseOrder(4), bytes, BucketCaps{8, 8});
  EXPECT_EQ(plan.id(), 1);
  EXPECT_EQ(plan.applies_from_iteration(), 7);
  ASSERT_EQ(plan.buckets_size(), 2);
  EXPECT_EQ(std::vector<int>(plan.buckets(0).param_index().begin(), plan.buckets(0).param_index().end()),
            (std::vector<int>{3, 2}));
  EXPECT_EQ(plan.buckets(0).bytes(), 104);
  EXPECT_EQ(std::vector<int>(plan.buckets(1).param_index().begin(), plan.buckets(1).param_index().end()),
            (std::vector<int>{1, 0}));
  EXPECT_EQ(plan.buckets(1).bytes(), 8);
}

TEST(BucketPlanner, CompleteReadyOrderAppendsMissingAndRejectsBad) {
  auto ok = CompleteReadyOrder({1, 3}, 4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, (std::vector<size_t>{1, 3, 2, 0}));
  auto dup = CompleteReadyOrder({1, 1}, 4);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(dup.status().message()).find("repeats"), std::string::npos);
  EXPECT_FALSE(CompleteReadyOrder({4}, 4).ok());
  EXPECT_FALSE(CompleteReadyOrder({-1}, 4).ok());
  EXPECT_FALSE(CompleteReadyOrder({0, 1, 2, 3, 0}, 4).ok());
}

}  // namespace
}  // namespace psync::server
