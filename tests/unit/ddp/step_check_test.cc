// The step check's pieces without processes: the tag encoding survives a
// float32 sum exactly, and the verdict names the rank out of step.
#include "worker/ddp/step_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "psync/tensor/ops.h"

namespace psync::ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What an allreduce sum leaves on every rank: the float32 sum of all rows.
Tensor SumOfTags(const std::vector<StepTag>& tags) {
  const int world = static_cast<int>(tags.size());
  std::vector<float> sum(static_cast<size_t>(world * kStepTagFloats), 0.0f);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> v = EncodeStepTag(tags[static_cast<size_t>(r)], r, world, Device::CPU()).ToVector();
    for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  }
  return Tensor::FromVector(sum, {world * kStepTagFloats});
}

TEST(StepCheck, TagsSurviveTheSumExactly) {
  const std::vector<StepTag> tags = {{0, 0, 0},
                                     {(int64_t{1} << 47) - 1, 12345678901LL, 0xffffffffu},
                                     {-1, -(int64_t{1} << 47), 0x80000001u},
                                     {16777216, 16777215, 0x01000000u}};
  absl::StatusOr<std::vector<StepTag>> got = DecodeStepTags(SumOfTags(tags), 4);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  for (size_t r = 0; r < tags.size(); ++r) {
    EXPECT_EQ((*got)[r].iteration, tags[r].iteration) << r;
    EXPECT_EQ((*got)[r].sequence, tags[r].sequence) << r;
    EXPECT_EQ((*got)[r].plan_id, tags[r].plan_id) << r;
  }
}

// The default hook averages the tags with bucket 0: 1/world rounded in
// float32 (world 3: inexact) is undone exactly.
TEST(StepCheck, TagsSurviveTheAverage) {
  for (int world : {2, 3, 5, 7, 64}) {
    std::vector<StepTag> tags;
    for (int r = 0; r < world; ++r) {
      tags.push_back(StepTag{(int64_t{1} << 47) - 1 - r, 0xfffffffffffLL - r, 0xffffffffu - static_cast<uint32_t>(r)});
    }
    const float scale = 1.0f / static_cast<float>(world);
    std::vector<float> v = SumOfTags(tags).ToVector();
    for (float& x : v) x *= scale;
    absl::StatusOr<std::vector<StepTag>> got =
        DecodeStepTags(Tensor::FromVector(v, {static_cast<int64_t>(v.size())}), world, scale);
    ASSERT_TRUE(got.ok()) << world << ": " << got.status();
    for (int r = 0; r < world; ++r) EXPECT_EQ((*got)[static_cast<size_t>(r)], tags[static_cast<size_t>(r)]) << r;
  }
}

TEST(StepCheck, GarbledSumIsNamed) {
  // A peer paired the exchange with a bucket: not integers in range.
  Tensor t = Tensor::FromVector(std::vector<float>(2 * kStepTagFloats, 0.25f), {2 * kStepTagFloats});
  absl::StatusOr<std::vector<StepTag>> got = DecodeStepTags(t, 2);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("rank 0's entry is not a step tag"));
  EXPECT_FALSE(DecodeStepTags(Tensor::Zeros({5}), 2).ok());
}

TEST(StepCheck, AgreementIsOk) {
  const std::vector<StepTag> same(3, StepTag{7, 7, 42});
  EXPECT_TRUE(CompareStepTags(same, std::nullopt, 0).ok());
  EXPECT_TRUE(CompareStepTags(same, StepTag{6, 6, 42}, 2).ok());
}

// Rank 1 skipped the backward of iteration 5: it reduces iteration 6 while
// rank 0 reduces iteration 5 (both their 6th synchronised backward).
TEST(StepCheck, SkippedBackwardNamesTheRankAhead) {
  const std::vector<StepTag> tags = {{5, 5, 9}, {6, 5, 9}};
  const StepTag last{4, 4, 9};
  for (int me : {0, 1}) {
    absl::Status st = CompareStepTags(tags, last, me);
    EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
    const std::string msg(st.message());
    EXPECT_THAT(msg, HasSubstr("DDP: rank 1 is out of step: rank 0 at iteration 5, rank 1 at iteration 6"));
    EXPECT_THAT(msg, HasSubstr("the last iteration every rank reduced together was 4"));
    EXPECT_THAT(msg, HasSubstr("seen on rank " + std::to_string(me) + " of 2"));
    EXPECT_THAT(msg, Not(HasSubstr("with bucket plan")));
    EXPECT_THAT(msg, Not(HasSubstr("synchronised backward #")));
  }
}

// Rank 0 ran an extra backward in iteration 3: its 5th synchronised backward
// still says iteration 3 while rank 1's says 4.
TEST(StepCheck, ExtraBackwardNamesTheRankBehind) {
  const std::vector<StepTag> tags = {{3, 4, 9}, {4, 4, 9}};
  absl::Status st = CompareStepTags(tags, StepTag{3, 3, 9}, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("DDP: rank 0 is out of step: rank 0 at iteration 3, rank 1 at iteration 4"));
}

TEST(StepCheck, WithoutHistoryTheMinorityIsNamed) {
  const std::vector<StepTag> tags = {{2, 2, 1}, {2, 2, 1}, {3, 2, 1}, {2, 2, 1}, {2, 2, 1}};
  absl::Status st = CompareStepTags(tags, std::nullopt, 4);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("DDP: rank 2 is out of step: ranks 0-1, 3-4 at iteration 2, rank 2 at iteration 3; no "
                        "earlier backward was checked"));
  // Two ranks, no history: a tie; both iterations are still named.
  st = CompareStepTags({{2, 2, 1}, {3, 2, 1}}, std::nullopt, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("DDP: the ranks disagree on which backward they are reducing: rank 0 at iteration 2, rank 1 "
                        "at iteration 3"));
}

TEST(StepCheck, DifferentBucketPlansAreNamed) {
  const std::vector<StepTag> tags = {{8, 8, 0xaaaa}, {8, 8, 0xaaaa}, {8, 8, 0xbbbb}};
  absl::Status st = CompareStepTags(tags, StepTag{7, 7, 0xaaaa}, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("DDP: rank 2 is out of step: ranks 0-1 at iteration 8 with bucket plan 0000aaaa, rank 2 at "
                        "iteration 8 with bucket plan 0000bbbb"));
}

TEST(StepCheck, SequenceShownWhenItDiffers) {
  // Reducers created at different times (a rank restarted without resuming).
  absl::Status st = CompareStepTags({{5, 5, 1}, {5, 0, 1}}, std::nullopt, 0);
  EXPECT_THAT(std::string(st.message()), HasSubstr("rank 1 at iteration 5 (synchronised backward #0)"));
}

TEST(StepCheck, PlanIdDependsOnLayout) {
  const BucketPlan a = {{0, 1}, {2}}, b = {{0}, {1, 2}}, c = {{1, 0}, {2}};
  EXPECT_EQ(BucketPlanId(a), BucketPlanId(BucketPlan{{0, 1}, {2}}));
  EXPECT_NE(BucketPlanId(a), BucketPlanId(b));
  EXPECT_NE(BucketPlanId(a), BucketPlanId(c));
}

TEST(StepCheck, RankListCollapsesRuns) {
  EXPECT_EQ(RankList({0}), "0");
  EXPECT_EQ(RankList({0, 1, 2, 4, 6, 7}), "0-2, 4, 6-7");
  EXPECT_EQ(RankList({}), "");
}

}  // namespace
}  // namespace psync::ddp
