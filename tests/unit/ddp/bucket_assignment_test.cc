// Bucket assignment (pure function) and Bucket slot views.
#include <gtest/gtest.h>

#include "worker/ddp/bucket.h"
#include "worker/ddp/bucket_assignment.h"
#include "psync/tensor/ops.h"

namespace psync::ddp {
namespace {

std::vector<Device> Cpu(size_t n) { return std::vector<Device>(n, Device::CPU()); }

TEST(BucketAssignment, ReverseOrderFirstBucketSmall) {
  // 6 params of 100 bytes; first cap 150, cap 250 (bucket closes once >= cap).
  std::vector<size_t> sizes(6, 100);
  BucketPlan plan = AssignBuckets(sizes, Cpu(6), BucketCaps{150, 250}, ReverseOrder(6));
  BucketPlan want = {{5, 4}, {3, 2, 1}, {0}};
  EXPECT_EQ(plan, want);
}

TEST(BucketAssignment, LargeParameterGetsOwnBucketAndNeverSplits) {
  std::vector<size_t> sizes = {10, 1000, 10, 10};
  BucketPlan plan = AssignBuckets(sizes, Cpu(4), BucketCaps{15, 100}, {0, 1, 2, 3});
  BucketPlan want = {{0, 1}, {2, 3}};
  EXPECT_EQ(plan, want);
  plan = AssignBuckets(sizes, Cpu(4), BucketCaps{5, 5}, {0, 1, 2, 3});
  want = {{0}, {1}, {2}, {3}};
  EXPECT_EQ(plan, want);
}

TEST(BucketAssignment, DefaultCapsOneBucketForSmallModel) {
  std::vector<size_t> sizes(10, 4096);
  BucketPlan plan = AssignBuckets(sizes, Cpu(10), BucketCaps{}, ReverseOrder(10));
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0], ReverseOrder(10));
}

TEST(BucketAssignment, FollowsGivenOrder) {
  std::vector<size_t> sizes(5, 100);
  std::vector<size_t> order = {2, 0, 4, 1, 3};
  BucketPlan plan = AssignBuckets(sizes, Cpu(5), BucketCaps{100, 200}, order);
  BucketPlan want = {{2}, {0, 4}, {1, 3}};
  EXPECT_EQ(plan, want);
  EXPECT_EQ(FlattenPlan(plan), order);
  // Deterministic: the same inputs give the same plan.
  EXPECT_EQ(AssignBuckets(sizes, Cpu(5), BucketCaps{100, 200}, order), plan);
}

TEST(BucketAssignment, SeparatesDevicesAndOrdersByReadiness) {
  std::vector<size_t> sizes(4, 100);
  std::vector<Device> devices = {Device::CPU(), Device::CUDA(0), Device::CPU(), Device::CUDA(0)};
  BucketPlan plan = AssignBuckets(sizes, devices, BucketCaps{1000, 1000}, {3, 2, 1, 0});
  BucketPlan want = {{3, 1}, {2, 0}};
  EXPECT_EQ(plan, want);
  EXPECT_TRUE(ValidateBucketPlan(plan, devices).ok());
}

// `st` is InvalidArgument and its message contains `needle`.
::testing::AssertionResult InvalidWith(const absl::Status& st, const std::string& needle) {
  if (st.code() != absl::StatusCode::kInvalidArgument) return ::testing::AssertionFailure() << "code: " << st;
  if (std::string(st.message()).find(needle) == std::string::npos) {
    return ::testing::AssertionFailure() << "'" << needle << "' not in: " << st;
  }
  return ::testing::AssertionSuccess();
}

TEST(BucketAssignment, Validation) {
  EXPECT_TRUE(ValidateOrder({1, 0, 2}, 3).ok());
  EXPECT_TRUE(InvalidWith(ValidateOrder({1, 1, 2}, 3), "index 1 twice"));
  EXPECT_TRUE(InvalidWith(ValidateOrder({1, 0}, 3), "2 entries for 3 parameters"));
  EXPECT_TRUE(InvalidWith(ValidateOrder({0, 1, 3}, 3), "index 3 of 3"));
  EXPECT_TRUE(ValidateBucketPlan({{0, 2}, {1}}, Cpu(3)).ok());
  EXPECT_TRUE(InvalidWith(ValidateBucketPlan({{0, 2}}, Cpu(3)), "parameter 1 is missing"));
  EXPECT_TRUE(InvalidWith(ValidateBucketPlan({{0, 2}, {1, 2}}, Cpu(3)), "parameter 2 appears twice (again in bucket 1)"));
  EXPECT_TRUE(InvalidWith(ValidateBucketPlan({{0, 1, 2}, {}}, Cpu(3)), "bucket 1 is empty"));
  EXPECT_TRUE(InvalidWith(ValidateBucketPlan({{0, 5}, {1, 2}}, Cpu(3)), "bucket 0 names parameter 5 of 3"));
  std::vector<Device> mixed = {Device::CPU(), Device::CUDA(0)};
  absl::Status st = ValidateBucketPlan({{0, 1}}, mixed);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("mixes devices"), std::string::npos) << st;
}

TEST(Bucket, SlotsAreViewsAndCopyInSemantics) {
  std::vector<autograd::Variable> params = {
      autograd::Variable(Tensor::Full({2, 3}, 1.0f), true, "a"),
      autograd::Variable(Tensor::Full({4}, 1.0f), true, "b"),
  };
  Bucket b = Bucket::Build(0, {1, 0}, params);
  EXPECT_EQ(b.buffer().numel(), 10);
  EXPECT_EQ(b.pending, 2u);
  ASSERT_EQ(b.slots().size(), 2u);
  EXPECT_EQ(b.slots()[0].param, 1u);
  EXPECT_EQ(b.slots()[0].offset, 0);
  EXPECT_EQ(b.slots()[1].offset, 4);
  EXPECT_TRUE(b.slots()[1].view.SharesStorageWith(b.buffer()));
  EXPECT_EQ(b.slots()[1].view.shape(), (Shape{2, 3}));

  // A fresh grad is copied in and grad becomes the view.
  params[0].set_grad(Tensor::Full({2, 3}, 5.0f));
  CopyGradIntoSlot(b.slots_mutable()[1], params[0]);
  EXPECT_TRUE(params[0].grad().IsSameView(b.slots()[1].view));
  EXPECT_EQ(b.buffer().ToVector()[4], 5.0f);
  // Accumulating in place into the view needs no copy.
  Tensor g = params[0].grad();
  ops::AddInPlace(g, Tensor::Full({2, 3}, 1.0f));
  CopyGradIntoSlot(b.slots_mutable()[1], params[0]);
  EXPECT_EQ(b.buffer().ToVector()[9], 6.0f);
  // Undefined grad: slot zeroed, grad stays undefined.
  ops::Fill(b.mutable_buffer(), 7.0f);
  CopyGradIntoSlot(b.slots_mutable()[0], params[1]);
  EXPECT_FALSE(params[1].grad().defined());
  std::vector<float> v = b.buffer().ToVector();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[3], 0.0f);
  EXPECT_EQ(v[4], 7.0f);
}

}  // namespace
}  // namespace psync::ddp
