// The one bucket packer and order validator (include/psync/common/bucket_packer.h), used
// by the coordinator's plans and the workers' own. The server's
// PackBuckets cases moved here with it (tests/unit/server had them).
#include "psync/common/bucket_packer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace psync {
namespace {

std::vector<std::vector<size_t>> Params(const std::vector<PackedBucket>& b) {
  std::vector<std::vector<size_t>> out;
  for (const auto& x : b) out.push_back(x.params);
  return out;
}

TEST(BucketPacker, FirstBucketUsesFirstCapOthersCap) {
  // sizes: 4 bytes each; first cap 8 -> 2 params, then cap 12 -> 3 params
  std::vector<size_t> bytes(8, 4);
  auto b = PackBuckets({7, 6, 5, 4, 3, 2, 1, 0}, bytes, BucketCaps{8, 12});
  EXPECT_EQ(Params(b), (std::vector<std::vector<size_t>>{{7, 6}, {5, 4, 3}, {2, 1, 0}}));
  EXPECT_EQ(b[0].bytes, 8u);
  EXPECT_EQ(b[1].bytes, 12u);
}

// PyTorch's rule (add, then close once the cap is reached): a parameter that
// straddles the cap stays in the bucket it starts. The coordinator's former
// packer closed the bucket before it ({0}, {1}, {2, 3}).
TEST(BucketPacker, BucketClosesOnceItReachesItsCapNeverSplittingAParameter) {
  std::vector<size_t> bytes = {4, 100, 4, 4};
  auto b = PackBuckets({0, 1, 2, 3}, bytes, BucketCaps{8, 8});
  EXPECT_EQ(Params(b), (std::vector<std::vector<size_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(b[0].bytes, 104u);
  // A parameter at or above the cap alone closes a fresh bucket.
  b = PackBuckets({1, 0, 2, 3}, bytes, BucketCaps{8, 8});
  EXPECT_EQ(Params(b), (std::vector<std::vector<size_t>>{{1}, {0, 2}, {3}}));
  // Just below the cap the bucket stays open.
  b = PackBuckets({0, 2, 3}, bytes, BucketCaps{9, 100});
  EXPECT_EQ(Params(b), (std::vector<std::vector<size_t>>{{0, 2, 3}}));
}

TEST(BucketPacker, OrderPreserved) {
  std::vector<size_t> bytes = {1, 1, 1, 1};
  auto b = PackBuckets({2, 0, 3, 1}, bytes, BucketCaps{100, 100});
  EXPECT_EQ(Params(b), (std::vector<std::vector<size_t>>{{2, 0, 3, 1}}));
}

TEST(BucketPacker, GroupsNeverShareAndEachHasItsOwnFirstBucket) {
  // Parameters alternate between groups 0 and 1, 10 bytes each; first cap 10, cap 20.
  std::vector<size_t> bytes(8, 10);
  std::vector<int> groups = {0, 1, 0, 1, 0, 1, 0, 1};
  auto b = PackBuckets({0, 1, 2, 3, 4, 5, 6, 7}, bytes, BucketCaps{10, 20}, groups);
  // Listed by the position of their first parameter.
  EXPECT_EQ(Params(b), (std::vector<std::vector<size_t>>{{0}, {1}, {2, 4}, {3, 5}, {6}, {7}}));
}

TEST(BucketPacker, ReverseOrder) {
  EXPECT_EQ(ReverseOrder(3), (std::vector<size_t>{2, 1, 0}));
  EXPECT_TRUE(ReverseOrder(0).empty());
}

// `st` is InvalidArgument and its message is `want`.
void ExpectInvalid(const absl::Status& st, const std::string& want) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(std::string(st.message()), want);
}

TEST(BucketPacker, ValidateParamOrderNamesPositionAndIndex) {
  EXPECT_TRUE(ValidateParamOrder({1, 0, 2}, 3, OrderRule::kPermutation).ok());
  ExpectInvalid(ValidateParamOrder({1, 0}, 3, OrderRule::kPermutation),
                "parameter order has 2 entries for 3 parameters");
  ExpectInvalid(ValidateParamOrder({1, 1, 2}, 3, OrderRule::kPermutation),
                "parameter order[1] names index 1 twice (it repeats parameter order[0])");
  ExpectInvalid(ValidateParamOrder({0, 1, 3}, 3, OrderRule::kPermutation),
                "parameter order[2] names index 3 of 3; parameter indices are 0..2");
  // A prefix may miss indices, but not repeat or stray.
  EXPECT_TRUE(ValidateParamOrder({1, 3}, 4, OrderRule::kPrefix, "ready_order").ok());
  EXPECT_TRUE(ValidateParamOrder({}, 4, OrderRule::kPrefix, "ready_order").ok());
  ExpectInvalid(ValidateParamOrder({2, -1}, 4, OrderRule::kPrefix, "ready_order"),
                "ready_order[1] names index -1 of 4; parameter indices are 0..3");
  ExpectInvalid(ValidateParamOrder({0, 1, 2, 3, 0}, 4, OrderRule::kPrefix, "ready_order"),
                "ready_order has 5 entries for 4 parameters");
}

}  // namespace
}  // namespace psync
