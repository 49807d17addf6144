// AccumulateGrad's gradient destination: Linear/Matmul backward write the
// leaf's gradient straight into it (no copy), at most one producer per
// backward, and only while grad is undefined.
#include <gtest/gtest.h>

#include "worker/autograd/accumulate_grad.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/tensor/ops.h"

namespace psync::autograd {
namespace {

Tensor T(std::vector<float> v, Shape s) { return Tensor::FromVector(v, s); }

TEST(GradDestination, LinearWritesWeightAndBiasGradsIntoDestinations) {
  Variable x(T({1, 2, 3, 4, 5, 6}, {2, 3}));
  Variable w(T({1, 0, -1, 2, 1, 0}, {2, 3}), true, "w");
  Variable b(T({0.5f, -0.5f}, {2}), true, "b");
  Tensor flat = Tensor::Full({8}, 123.0f);  // like a bucket: b then w
  Tensor b_slot = flat.View(0, {2}), w_slot = flat.View(2, {2, 3});
  w.grad_accumulator()->SetGradDestination(w_slot);
  b.grad_accumulator()->SetGradDestination(b_slot);

  Variable loss = Sum(Linear(x, w, b));
  ASSERT_TRUE(Backward(loss).ok());
  EXPECT_TRUE(w.grad().IsSameView(w_slot));
  EXPECT_TRUE(b.grad().IsSameView(b_slot));
  EXPECT_EQ(w.grad().ToVector(), (std::vector<float>{5, 7, 9, 5, 7, 9}));
  EXPECT_EQ(b.grad().ToVector(), (std::vector<float>{2, 2}));

  // grad defined now: the second backward accumulates in place.
  Variable loss2 = Sum(Linear(x, w, b));
  ASSERT_TRUE(Backward(loss2).ok());
  EXPECT_TRUE(w.grad().IsSameView(w_slot));
  EXPECT_EQ(w.grad().ToVector(), (std::vector<float>{10, 14, 18, 10, 14, 18}));

  // Cleared: a fresh gradient is a new tensor again.
  w.grad_accumulator()->SetGradDestination(Tensor());
  w.set_grad(Tensor());
  Variable loss3 = Sum(Linear(x, w, b));
  ASSERT_TRUE(Backward(loss3).ok());
  EXPECT_FALSE(w.grad().SharesStorageWith(flat));
  EXPECT_EQ(w.grad().ToVector(), (std::vector<float>{5, 7, 9, 5, 7, 9}));
}

TEST(GradDestination, TwoProducersOfOneLeafAreSummedCorrectly) {
  // w used by two matmuls: only one may write into the destination.
  Variable a(T({1, 2, 3, 4}, {2, 2}));
  Variable c(T({0, 1, 1, 0}, {2, 2}));
  Variable w(T({1, 1, 1, 1}, {2, 2}), true, "w");
  Tensor dest = Tensor::Full({2, 2}, -7.0f);
  w.grad_accumulator()->SetGradDestination(dest);
  Variable loss = Sum(Add(Matmul(a, w), Matmul(c, w)));
  ASSERT_TRUE(Backward(loss).ok());
  // d/dw sum(a w) = a^T 1, plus c^T 1.
  EXPECT_EQ(w.grad().ToVector(), (std::vector<float>{4 + 1, 4 + 1, 6 + 1, 6 + 1}));

  // Reference without destination.
  Variable w2(T({1, 1, 1, 1}, {2, 2}), true, "w2");
  Variable loss2 = Sum(Add(Matmul(a, w2), Matmul(c, w2)));
  ASSERT_TRUE(Backward(loss2).ok());
  EXPECT_EQ(w.grad().ToVector(), w2.grad().ToVector());
}

TEST(GradDestination, WrongShapeIsIgnored) {
  Variable x(T({1, 2}, {1, 2}));
  Variable w(T({1, 1}, {1, 2}), true, "w");
  Tensor dest = Tensor::Zeros({2, 1});
  w.grad_accumulator()->SetGradDestination(dest);
  ASSERT_TRUE(Backward(Sum(Linear(x, w, Variable()))).ok());
  EXPECT_FALSE(w.grad().SharesStorageWith(dest));
  EXPECT_EQ(w.grad().ToVector(), (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace psync::autograd
