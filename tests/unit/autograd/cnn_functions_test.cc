// Float64 gradient checks of the CNN's layers (Conv2d, MaxPool2d;
// include/psync/autograd/nn_functions.h) on several geometries, alone and composed
// into the whole CNN (conv, ReLU, pool, twice, then Linear and
// cross-entropy); plus which gradients a Conv2d node computes, where it
// writes them, what the nodes save, and their error messages.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/autograd/gradcheck.h"
#include "worker/autograd/accumulate_grad.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/nn_functions.h"
#include "psync/autograd/view_functions.h"

namespace psync::autograd {
namespace {

using testing::GradOk;
using testing::GradCheckOptions;
using testing::RandomDouble;

TEST(CnnFunctions, Conv2dGradCheck) {
  struct C {
    Shape x, w;
    int64_t stride, padding;
  };
  // 3x3 "same", stride 2 with a non-square kernel, 1x1 (no im2col), a
  // kernel larger than the image, stride 3 with padding 2.
  for (const C& c : {C{{2, 2, 4, 4}, {3, 2, 3, 3}, 1, 1}, C{{2, 3, 5, 6}, {2, 3, 3, 2}, 2, 0},
                     C{{2, 3, 3, 2}, {4, 3, 1, 1}, 1, 0}, C{{1, 2, 2, 3}, {2, 2, 4, 4}, 1, 2},
                     C{{1, 2, 7, 7}, {2, 2, 3, 3}, 3, 2}}) {
    const std::string what = ShapeToString(c.x) + " * " + ShapeToString(c.w);
    EXPECT_TRUE(GradOk([&](const std::vector<Variable>& v) { return Conv2d(v[0], v[1], v[2], c.stride, c.padding); },
                          {RandomDouble(c.x, 1), RandomDouble(c.w, 2), RandomDouble({c.w[0]}, 3)}))
        << what;
    EXPECT_TRUE(GradOk(
        [&](const std::vector<Variable>& v) { return Conv2d(v[0], v[1], Variable(), c.stride, c.padding); },
        {RandomDouble(c.x, 4), RandomDouble(c.w, 5)}))
        << what << " without bias";
  }
  // Only x requiring grad (a frozen layer), and only the parameters (the first layer).
  const std::vector<Tensor> in = {RandomDouble({2, 2, 5, 5}, 6), RandomDouble({3, 2, 3, 3}, 7), RandomDouble({3}, 8)};
  auto conv = [](const std::vector<Variable>& v) { return Conv2d(v[0], v[1], v[2], 1, 1); };
  GradCheckOptions only_x;
  only_x.constant_inputs = {1, 2};
  EXPECT_TRUE(GradOk(conv, in, only_x));
  GradCheckOptions only_params;
  only_params.constant_inputs = {0};
  EXPECT_TRUE(GradOk(conv, in, only_params));
}

TEST(CnnFunctions, MaxPool2dGradCheck) {
  // Random doubles: no ties, so the max of a window does not move under the
  // finite-difference step. Odd sizes drop the last row/column.
  for (const Shape& shape : {Shape{2, 3, 4, 4}, Shape{1, 2, 5, 7}, Shape{2, 1, 6, 6}}) {
    for (int64_t k : {1, 2, 3}) {
      EXPECT_TRUE(GradOk([&](const std::vector<Variable>& v) { return MaxPool2d(v[0], k); },
                            {RandomDouble(shape, 10)}))
          << ShapeToString(shape) << " k " << k;
    }
  }
}

TEST(CnnFunctions, WholeCnnGradCheck) {
  // The --model=cnn network at a small size: [N, 1, 8, 8] -> conv3x3(1->3,
  // padding 1) -> ReLU -> pool 2 -> conv3x3(3->4, padding 1) -> ReLU -> pool
  // 2 -> flatten [N, 16] -> Linear(16 -> 5) -> cross-entropy.
  const Tensor labels = Tensor::FromVector(std::vector<int64_t>{3, 0, 4}, {3});
  EXPECT_TRUE(GradOk(
      [&](const std::vector<Variable>& v) {
        Variable h = MaxPool2d(Relu(Conv2d(v[0], v[1], v[2], 1, 1)), 2);
        h = MaxPool2d(Relu(Conv2d(h, v[3], v[4], 1, 1)), 2);
        return CrossEntropyLoss(Linear(Reshape(h, {3, -1}), v[5], v[6]), labels);
      },
      {RandomDouble({3, 1, 8, 8}, 20), RandomDouble({3, 1, 3, 3}, 21), RandomDouble({3}, 22),
       RandomDouble({4, 3, 3, 3}, 23), RandomDouble({4}, 24), RandomDouble({5, 16}, 25), RandomDouble({5}, 26)}));
}

TEST(CnnFunctions, Conv2dComputesOnlyNeededGradientsIntoDestinations) {
  // The image batch needs no gradient: x gets none, weight and bias theirs,
  // written straight into slots of one flat buffer (a DDP bucket).
  const Tensor x = RandomDouble({2, 2, 5, 5}, 30);
  Variable w(RandomDouble({3, 2, 3, 3}, 31), true, "w"), b(RandomDouble({3}, 32), true, "b");
  Variable w2(w.data().Clone(), true, "w2"), b2(b.data().Clone(), true, "b2");
  Tensor flat = Tensor::Zeros({54 + 3}, kFloat64);
  w.grad_accumulator()->SetGradDestination(flat.View(0, {3, 2, 3, 3}));
  b.grad_accumulator()->SetGradDestination(flat.View(54, {3}));
  const Tensor g = RandomDouble({2, 3, 5, 5}, 33);
  ASSERT_TRUE(Backward(Sum(Mul(Conv2d(Variable(x), w, b, 1, 1), Variable(g)))).ok());
  ASSERT_TRUE(Backward(Sum(Mul(Conv2d(Variable(x), w2, b2, 1, 1), Variable(g)))).ok());
  EXPECT_TRUE(w.grad().IsSameView(flat.View(0, {3, 2, 3, 3})));
  EXPECT_TRUE(b.grad().IsSameView(flat.View(54, {3})));
  EXPECT_EQ(w.grad().ToVector<double>(), w2.grad().ToVector<double>());
  EXPECT_EQ(b.grad().ToVector<double>(), b2.grad().ToVector<double>());
  // No bias: two inputs' gradients only.
  Variable xv(x, true, "x");
  ASSERT_TRUE(Backward(Sum(Conv2d(xv, w2, Variable(), 1, 0))).ok());
  EXPECT_EQ(xv.grad().shape(), x.shape());
}

TEST(CnnFunctions, NodesAreNamedAndReleaseWhatTheySaved) {
  Variable x(RandomDouble({1, 2, 4, 4}, 40), true, "x"), w(RandomDouble({2, 2, 3, 3}, 41), true, "w");
  Variable y = Conv2d(x, w, Variable(), 1, 1);
  EXPECT_EQ(y.grad_fn()->name(), "Conv2dBackward");
  Variable p = MaxPool2d(y, 2);
  EXPECT_EQ(p.grad_fn()->name(), "MaxPool2dBackward");
  ASSERT_TRUE(Backward(Sum(p)).ok());
  absl::Status again = Backward(Sum(p));  // the saved indices were released
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_NE(again.message().find("MaxPool2dBackward"), std::string::npos) << again;
  EXPECT_EQ(MaxPool2d(Variable(x.data()), 2).grad_fn(), nullptr);
  EXPECT_FALSE(Conv2d(Variable(x.data()), Variable(w.data()), Variable(), 1, 1).requires_grad());
}

TEST(CnnFunctions, ErrorsNameTheOpAndOperands) {
  Variable x(RandomDouble({1, 2, 4, 4}, 50), true, "x");
  try {
    Conv2d(x, Variable(RandomDouble({3, 1, 3, 3}, 51), true, "w"), Variable(), 1, 1);
    ADD_FAILURE() << "expected TensorError";
  } catch (const TensorError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Conv2d(x [1, 2, 4, 4] float64 cpu, weight [3, 1, 3, 3] float64 cpu)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Cin = 1 but x has 2 channels"), std::string::npos) << msg;
  }
  EXPECT_THROW(Conv2d(x, Variable(), Variable(), 1, 1), TensorError);
  EXPECT_THROW(MaxPool2d(x, 5), TensorError);
}

}  // namespace
}  // namespace psync::autograd
