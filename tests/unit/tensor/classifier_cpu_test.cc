// The fused classifier on the CPU (ops::FusedClassifier: the loss and the
// logits' gradient in one pass, written over the logits): the same bits as
// CrossEntropy + CrossEntropyBackward in float32 and float64, on padded
// (strided) rows without touching the pad, bfloat16 within its precision,
// the rescale for another incoming gradient, and errors that leave the
// logits untouched.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/tensor/attention_test_util.h"
#include "psync/tensor/ops.h"

namespace psync {
namespace {

using ::psync::testing::ExpectTensorError;
using ::psync::testing::RandomLabels;
using ::psync::testing::RandomTensor;
using ::psync::testing::RelDiff;
using ::psync::testing::SameBits;

TEST(ClassifierCpu, SameBitsAsCrossEntropyAndItsBackward) {
  for (DType dt : {kFloat32, kFloat64}) {
    for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 3}, {64, 256}, {9, 1031}}) {
      const Tensor logits = RandomTensor({rows, cols}, 3, Device::CPU(), -8.0f, 8.0f).To(dt);
      const Tensor targets = RandomLabels(rows, cols, 4);
      for (float scale : {1.0f, 0.25f}) {
        const Tensor want_loss = ops::CrossEntropy(logits, targets);
        const Tensor want_grad =
            ops::CrossEntropyBackward(Tensor::Full({}, scale, dt, Device::CPU()), logits, targets);
        Tensor x = logits.Clone();
        const Tensor loss = ops::FusedClassifier(x, targets, scale);
        EXPECT_TRUE(SameBits(loss, want_loss)) << DTypeName(dt) << " " << rows << "x" << cols;
        EXPECT_TRUE(SameBits(x, want_grad)) << DTypeName(dt) << " " << rows << "x" << cols << " scale " << scale;
      }
    }
  }
}

TEST(ClassifierCpu, PaddedRowsAreAViewAndThePadIsNeverTouched) {
  // [N, V] view of [N, Vp] rows, as the GPT's padded head returns.
  const int64_t N = 10, V = 50, Vp = 128;
  Tensor padded = RandomTensor({N, Vp}, 5, Device::CPU(), -3.0f, 3.0f);
  const Tensor before = padded.Clone();
  const Tensor view = padded.Narrow(1, 0, V);
  const Tensor targets = RandomLabels(N, V, 6);
  const Tensor want_loss = ops::CrossEntropy(view.Contiguous(), targets);
  const Tensor want_grad = ops::CrossEntropyBackward(Tensor::Scalar(1.0f), view.Contiguous(), targets);
  EXPECT_TRUE(SameBits(ops::FusedClassifier(view, targets, 1.0f), want_loss));
  EXPECT_TRUE(SameBits(view.Contiguous(), want_grad));
  EXPECT_TRUE(SameBits(padded.Narrow(1, V, Vp - V).Contiguous(), before.Narrow(1, V, Vp - V).Contiguous()));
}

TEST(ClassifierCpu, BFloat16WithinItsPrecision) {
  const Tensor logits = RandomTensor({33, 300}, 7, Device::CPU(), -6.0f, 6.0f).To(kBFloat16);
  const Tensor targets = RandomLabels(33, 300, 8);
  const Tensor f32 = logits.To(kFloat32);
  Tensor x = logits.Clone();
  const Tensor loss = ops::FusedClassifier(x, targets, 0.5f);
  ASSERT_EQ(loss.dtype(), kFloat32);
  EXPECT_NEAR(loss.Item(), ops::CrossEntropy(f32, targets).Item(), 1e-5);
  const Tensor want = ops::CrossEntropyBackward(Tensor::Scalar(0.5f), f32, targets);
  EXPECT_EQ(x.dtype(), kBFloat16);
  EXPECT_LE(RelDiff(x, want), 1e-2);
}

TEST(ClassifierCpu, RescaleOnlyWhenTheGradientDiffers) {
  const Tensor logits = RandomTensor({5, 20}, 9), targets = RandomLabels(5, 20, 10);
  Tensor x = logits.Clone();
  ops::FusedClassifier(x, targets, 0.5f);
  const Tensor written = x.Clone();
  ops::RescaleClassifierGrad(x, Tensor::Scalar(0.5f), 0.5f);
  EXPECT_TRUE(SameBits(x, written));
  ops::RescaleClassifierGrad(x, Tensor::Scalar(2.0f), 0.5f);
  const Tensor want = ops::CrossEntropyBackward(Tensor::Scalar(2.0f), logits, targets);
  EXPECT_LE(RelDiff(x, want), 1e-6);
}

TEST(ClassifierCpu, ErrorsLeaveTheLogitsUntouched) {
  Tensor x = RandomTensor({3, 4}, 11);
  const Tensor before = x.Clone();
  ExpectTensorError([&] { ops::FusedClassifier(x, Tensor::FromVector(std::vector<int64_t>{0, 4, 1}, {3}), 1.0f); },
                    {"FusedClassifier", "target 4 at row 1"});
  EXPECT_TRUE(SameBits(x, before));
  ExpectTensorError([&] { ops::FusedClassifier(x.Transpose(0, 1), RandomLabels(4, 3, 1), 1.0f); },
                    {"FusedClassifier", "contiguous columns"});
  ExpectTensorError([&] { ops::FusedClassifier(x, RandomLabels(2, 4, 1), 1.0f); },
                    {"FusedClassifier", "one entry per row"});
  ExpectTensorError([&] { ops::FusedClassifier(x.To(kFloat16), RandomLabels(3, 4, 1), 1.0f); },
                    {"FusedClassifier", "float32, bfloat16"});
  ExpectTensorError([&] { ops::RescaleClassifierGrad(x, Tensor::Scalar(1.0f), 0.0f); },
                    {"RescaleClassifierGrad", "nonzero"});
}

}  // namespace
}  // namespace psync
