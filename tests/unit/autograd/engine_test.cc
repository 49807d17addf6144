#include "psync/autograd/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "psync/common/logging.h"
#include "worker/autograd/accumulate_grad.h"
#include "psync/autograd/functions.h"
#include "psync/tensor/ops.h"

namespace psync::autograd {
namespace {

using ::testing::HasSubstr;

Variable Leaf(std::vector<float> v, const std::string& name) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Variable(Tensor::FromVector(v, {n}), true, name);
}

std::vector<float> GradOf(const Variable& v) { return v.grad().ToVector(); }

TEST(Engine, SimpleChainGradient) {
  Variable x = Leaf({1, 2, 3}, "x");
  Variable loss = Sum(Mul(x, x));  // d/dx = 2x
  ASSERT_TRUE(Backward(loss).ok());
  EXPECT_EQ(GradOf(x), (std::vector<float>{2, 4, 6}));
}

TEST(Engine, GradientsForTheSameSlotAreSummed) {
  Variable x = Leaf({1, 2}, "x");
  Variable y = Add(x, x);                      // two edges into x's accumulator
  Variable z = Add(Scale(y, 3.0f), y);         // y's node gets two gradients: 3 + 1
  ASSERT_TRUE(Backward(Sum(z)).ok());
  EXPECT_EQ(GradOf(x), (std::vector<float>{8, 8}));
}

TEST(Engine, GradientsAccumulateAcrossBackwardCallsUntilZeroed) {
  Variable x = Leaf({1, 2}, "x");
  ASSERT_TRUE(Backward(Sum(Scale(x, 3.0f))).ok());
  ASSERT_TRUE(Backward(Sum(Scale(x, 3.0f))).ok());
  EXPECT_EQ(GradOf(x), (std::vector<float>{6, 6}));
  x.set_grad(Tensor());
  ASSERT_TRUE(Backward(Sum(Scale(x, 3.0f))).ok());
  EXPECT_EQ(GradOf(x), (std::vector<float>{3, 3}));
}

TEST(Engine, AccumulationIntoAViewStaysInTheView) {
  // The reducer makes grads views into a flat bucket; accumulation must
  // write into that bucket, not replace the grad.
  Variable x = Leaf({1, 2}, "x");
  Tensor bucket = Tensor::Full({5}, 10.0f);
  x.set_grad(bucket.View(2, {2}));
  ASSERT_TRUE(Backward(Sum(Scale(x, 2.0f))).ok());
  EXPECT_TRUE(x.grad().IsSameView(bucket.View(2, {2})));
  EXPECT_EQ(bucket.ToVector(), (std::vector<float>{10, 10, 12, 12, 10}));
}

TEST(Engine, FirstGradientIsNotAliasedWithTheCallersTensor) {
  Variable x = Leaf({1, 2}, "x");
  Tensor seed = Tensor::FromVector({5, 7}, {2});
  ASSERT_TRUE(Engine::Get().Backward({x}, {seed}).ok());
  EXPECT_EQ(GradOf(x), (std::vector<float>{5, 7}));
  EXPECT_FALSE(x.grad().SharesStorageWith(seed));
  ASSERT_TRUE(Engine::Get().Backward({x}, {seed}).ok());
  EXPECT_EQ(seed.ToVector(), (std::vector<float>{5, 7}));  // untouched by accumulation
  EXPECT_EQ(GradOf(x), (std::vector<float>{10, 14}));
}

TEST(Engine, BackwardThroughAFreedGraphIsAClearError) {
  Variable x = Leaf({1, 2}, "x");
  Variable loss = Sum(Mul(x, x));
  ASSERT_TRUE(Backward(loss).ok());
  absl::Status st = Backward(loss);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("MulBackward"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("retain_graph=true"));
}

TEST(Engine, RetainGraphAllowsASecondBackward) {
  Variable x = Leaf({1, 2}, "x");
  Variable loss = Sum(Mul(x, x));
  ASSERT_TRUE(Engine::Get().Backward({loss}, {}, /*retain_graph=*/true).ok());
  ASSERT_TRUE(Backward(loss).ok());
  EXPECT_EQ(GradOf(x), (std::vector<float>{4, 8}));
}

TEST(Engine, RootThatDoesNotRequireGradIsAClearError) {
  Variable x(Tensor::Scalar(1.0f), false, "x");
  absl::Status st = Backward(x);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("does not require grad"));
  // An op on inputs that need no grad builds no graph either.
  Variable y = Scale(x, 2.0f);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(Backward(y).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Engine, NonScalarRootNeedsAnExplicitGradient) {
  Variable x = Leaf({1, 2}, "x");
  absl::Status st = Backward(Scale(x, 2.0f));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("grad_roots"));
  st = Engine::Get().Backward({Scale(x, 2.0f)}, {Tensor::Zeros({3})});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("[3]"));
}

TEST(Engine, PreHookCanReplaceGradientsAndPostHookSeesInputsAndOutputs) {
  Variable x = Leaf({1, 2}, "x");
  Variable y = Scale(x, 3.0f);
  y.grad_fn()->AddPreHook([](const TensorList& grads) { return TensorList{ops::Scale(grads[0], 2.0f)}; });
  std::vector<float> seen_in, seen_out;
  y.grad_fn()->AddPostHook([&](const TensorList& outputs, const TensorList& inputs) {
    seen_out = outputs.at(0).ToVector();
    seen_in = inputs.at(0).ToVector();
  });
  ASSERT_TRUE(Engine::Get().Backward({y}, {Tensor::Full({2}, 1.0f)}).ok());
  EXPECT_EQ(seen_in, (std::vector<float>{2, 2}));    // after the pre-hook
  EXPECT_EQ(seen_out, (std::vector<float>{6, 6}));
  EXPECT_EQ(GradOf(x), (std::vector<float>{6, 6}));
}

TEST(Engine, AccumulatorHooksStayAttachedAcrossIterationsAndCanBeRemoved) {
  Variable x = Leaf({1}, "x");
  int calls = 0;
  std::vector<float> grads_seen;
  const int id = x.grad_accumulator()->AddPostHook([&](const TensorList& outputs, const TensorList& inputs) {
    ++calls;
    EXPECT_TRUE(outputs.empty());
    grads_seen.push_back(inputs.at(0).Item());
  });
  for (int it = 1; it <= 3; ++it) ASSERT_TRUE(Backward(Sum(Scale(x, static_cast<float>(it)))).ok());
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(grads_seen, (std::vector<float>{1, 2, 3}));
  EXPECT_FLOAT_EQ(x.grad().Item(), 6.0f);
  x.grad_accumulator()->RemovePostHook(id);
  ASSERT_TRUE(Backward(Sum(x)).ok());
  EXPECT_EQ(calls, 3);
}

TEST(Engine, QueuedCallbackRunsAfterEveryNode) {
  Variable a = Leaf({1}, "a");
  Variable b = Leaf({2}, "b");
  Variable loss = Sum(Add(Mul(a, b), Scale(a, 2.0f)));
  std::vector<std::string> log;
  Engine::Get().SetNodeObserver([&](const Node& n, bool begin) {
    if (!begin) log.push_back(n.name());
  });
  int queued = 0;
  // Queue from the first accumulator hook, like the reducer's finalize.
  a.grad_accumulator()->AddPreHook([&](const TensorList& g) {
    EXPECT_TRUE(Engine::Get().InBackward());
    if (queued++ == 0) {
      EXPECT_TRUE(Engine::Get()
                      .QueueCallback([&] {
                        log.push_back("callback");
                        // Callbacks may queue callbacks; they run too.
                        return Engine::Get().QueueCallback([&] {
                          log.push_back("nested callback");
                          return absl::OkStatus();
                        });
                      })
                      .ok());
    }
    return g;
  });
  ASSERT_TRUE(Backward(loss).ok());
  Engine::Get().SetNodeObserver(nullptr);
  ASSERT_GE(log.size(), 3u);
  EXPECT_EQ(log[log.size() - 2], "callback");
  EXPECT_EQ(log.back(), "nested callback");
  EXPECT_EQ(log.size(), 2u + 6u);  // Sum, Add, Mul, Scale, Acc(a), Acc(b) + 2 callbacks
  EXPECT_FALSE(Engine::Get().InBackward());
}

TEST(Engine, QueueCallbackOutsideBackwardFails) {
  absl::Status st = Engine::Get().QueueCallback([] { return absl::OkStatus(); });
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Engine, FailingCallbackBecomesTheResultButLaterCallbacksStillRun) {
  Variable x = Leaf({1}, "x");
  bool second_ran = false;
  x.grad_accumulator()->AddPreHook([&](const TensorList& g) {
    (void)Engine::Get().QueueCallback([] { return absl::DataLossError("bucket 3 never reduced"); });
    (void)Engine::Get().QueueCallback([&] {
      second_ran = true;
      return absl::InternalError("second error");
    });
    return g;
  });
  absl::Status st = Backward(Sum(x));
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(st.message()), HasSubstr("bucket 3"));
  EXPECT_TRUE(second_ran);
}

TEST(Engine, ExceptionsFromHooksBecomeStatusNamingTheNode) {
  Variable x = Leaf({1}, "weight0");
  const int id = x.grad_accumulator()->AddPostHook([](const TensorList&, const TensorList&) {
    throw TensorError("bucket view has the wrong size");
  });
  absl::Status st = Backward(Sum(x));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("AccumulateGrad(weight0)"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("bucket view has the wrong size"));
  x.grad_accumulator()->RemovePostHook(id);

  Variable y = Scale(x, 2.0f);
  y.grad_fn()->AddPreHook([](const TensorList& g) -> TensorList {
    PSYNC_CHECK(false) << "invariant broken";
    return g;
  });
  st = Backward(Sum(y));
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()), HasSubstr("ScaleBackward"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("invariant broken"));
  EXPECT_FALSE(Engine::Get().InBackward());
}

TEST(Engine, ObserverSeesBeginAndEndOfEveryNode) {
  Variable x = Leaf({1}, "x");
  std::vector<std::pair<std::string, bool>> events;
  Engine::Get().SetNodeObserver([&](const Node& n, bool begin) { events.emplace_back(n.name(), begin); });
  ASSERT_TRUE(Backward(Sum(x)).ok());
  Engine::Get().SetNodeObserver(nullptr);
  ASSERT_TRUE(Backward(Sum(x)).ok());  // no observer: nothing recorded
  std::vector<std::pair<std::string, bool>> want = {
      {"SumBackward", true}, {"SumBackward", false}, {"AccumulateGrad(x)", true}, {"AccumulateGrad(x)", false}};
  EXPECT_EQ(events, want);
}

TEST(Engine, ReachableAccumulatorsListsOnlyLeavesInTheGraph) {
  Variable used1 = Leaf({1}, "used1");
  Variable used2 = Leaf({1}, "used2");
  Variable unused = Leaf({1}, "unused");
  Variable constant(Tensor::FromVector({1}, {1}), false, "constant");
  Variable out = Add(Mul(used1, constant), Add(used2, used1));
  auto accs = ReachableAccumulators({out});
  std::vector<std::string> names;
  for (const auto& acc : accs) names.push_back(acc->variable().name());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"used1", "used2"}));
  EXPECT_EQ(unused.grad_accumulator()->variable().name(), "unused");
  // A leaf output counts itself.
  auto self = ReachableAccumulators({unused});
  ASSERT_EQ(self.size(), 1u);
  EXPECT_EQ(self[0], unused.grad_accumulator());
  EXPECT_TRUE(ReachableAccumulators({constant}).empty());
}

TEST(Engine, BackwardFromSeveralRoots) {
  Variable x = Leaf({1, 2}, "x");
  Variable y1 = Sum(Scale(x, 2.0f));
  Variable y2 = Sum(Mul(x, x));
  ASSERT_TRUE(Engine::Get().Backward({y1, y2}).ok());
  EXPECT_EQ(GradOf(x), (std::vector<float>{4, 6}));
}

TEST(Engine, ThreadsRunIndependentBackwards) {
  // Ranks as threads: each thread's backward, callbacks and InBackward are
  // its own.
  std::atomic<int> failures{0};
  auto work = [&](float scale) {
    for (int it = 0; it < 50; ++it) {
      Variable x = Leaf({1, 1, 1}, "x");
      bool ran = false;
      x.grad_accumulator()->AddPreHook([&](const TensorList& g) {
        if (!Engine::Get().QueueCallback([&] { ran = true; return absl::OkStatus(); }).ok()) ++failures;
        return g;
      });
      if (!Backward(Sum(Scale(x, scale))).ok() || !ran || x.grad().ToVector()[1] != scale) ++failures;
    }
  };
  std::thread t1(work, 2.0f), t2(work, 3.0f);
  t1.join();
  t2.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace psync::autograd

namespace psync::autograd {
namespace {

TEST(Engine, ThrowingObserverBecomesAStatus) {
  Variable x(Tensor::Scalar(1.0f), true, "x");
  Engine::Get().SetNodeObserver([](const Node&, bool) { throw std::runtime_error("trace file full"); });
  absl::Status st = Backward(Sum(x));
  Engine::Get().SetNodeObserver(nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("trace file full"));
}

}  // namespace
}  // namespace psync::autograd
