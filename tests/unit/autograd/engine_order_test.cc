// The design's example for "AccumulateGrad runs first":
//   ab = a + b; cd = c + d; final = ab + cd
// run twice on the same leaves (a new forward each time).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "worker/autograd/accumulate_grad.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"

namespace psync::autograd {
namespace {

struct Executed {
  const Node* node;
  std::string name;
  bool is_accumulator;
  std::vector<const Node*> next;  // copied now: the graph is gone when we check
};

// Installs a node observer that records begin events; removes it on exit.
class Recorder {
 public:
  Recorder() {
    Engine::Get().SetNodeObserver([this](const Node& node, bool begin) {
      if (!begin) return;
      std::vector<const Node*> next;
      for (const Edge& e : node.next_edges()) next.push_back(e.function.get());
      trace.push_back({&node, node.name(), dynamic_cast<const AccumulateGrad*>(&node) != nullptr, next});
    });
  }
  ~Recorder() { Engine::Get().SetNodeObserver(nullptr); }
  std::vector<Executed> trace;
};

struct Leaves {
  Variable a{Tensor::Scalar(1.0f), true, "a"};
  Variable b{Tensor::Scalar(2.0f), true, "b"};
  Variable c{Tensor::Scalar(3.0f), true, "c"};
  Variable d{Tensor::Scalar(4.0f), true, "d"};
};

// One iteration: a new forward graph on the same leaves, then backward.
std::vector<Executed> Iterate(Leaves& l) {
  Variable ab = Add(l.a, l.b);
  Variable cd = Add(l.c, l.d);
  Variable final_sum = Add(ab, cd);
  Recorder rec;
  absl::Status st = Engine::Get().Backward({final_sum});
  EXPECT_TRUE(st.ok()) << st;
  return rec.trace;
}

std::vector<std::string> AccumulatorOrder(const std::vector<Executed>& trace) {
  std::vector<std::string> out;
  for (const Executed& e : trace) {
    if (e.is_accumulator) out.push_back(e.name);
  }
  return out;
}

// True when every AccumulateGrad runs right after the node that produced its
// gradient, with only other AccumulateGrads of that node in between.
bool AccumulatorsFollowProducers(const std::vector<Executed>& trace) {
  const Executed* producer = nullptr;
  for (const Executed& e : trace) {
    if (!e.is_accumulator) {
      producer = &e;
      continue;
    }
    if (producer == nullptr) return false;
    bool feeds = false;
    for (const Node* next : producer->next) feeds |= next == e.node;
    if (!feeds) return false;
  }
  return true;
}

std::string Describe(const std::vector<Executed>& trace) {
  std::string s;
  for (const Executed& e : trace) s += e.name + " ";
  return s;
}

TEST(EngineOrder, WithPrioritiesAccumulatorsRunRightAfterTheirProducerOnEveryIteration) {
  ScopedPriorities priorities(true);
  Leaves leaves;
  std::vector<Executed> first = Iterate(leaves);
  std::vector<Executed> second = Iterate(leaves);
  ASSERT_EQ(first.size(), 7u) << Describe(first);  // 3 adds + 4 accumulators
  ASSERT_EQ(second.size(), 7u) << Describe(second);

  EXPECT_EQ(AccumulatorOrder(first), AccumulatorOrder(second)) << Describe(first) << "| " << Describe(second);
  EXPECT_TRUE(AccumulatorsFollowProducers(first)) << Describe(first);
  EXPECT_TRUE(AccumulatorsFollowProducers(second)) << Describe(second);
  // cd was built after ab, so its branch runs first (higher sequence numbers).
  EXPECT_EQ(AccumulatorOrder(second),
            (std::vector<std::string>{"AccumulateGrad(d)", "AccumulateGrad(c)", "AccumulateGrad(b)",
                                      "AccumulateGrad(a)"}));
  EXPECT_FLOAT_EQ(leaves.a.grad().Item(), 2.0f);  // accumulated over both passes
}

TEST(EngineOrder, WithoutPrioritiesTheSecondIterationRunsEveryAccumulatorLast) {
  ScopedPriorities priorities(false);
  Leaves leaves;
  std::vector<Executed> first = Iterate(leaves);
  std::vector<Executed> second = Iterate(leaves);
  ASSERT_EQ(second.size(), 7u) << Describe(second);
  // On the second pass the accumulators are older than every new node.
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(second[i].is_accumulator) << Describe(second);
  for (size_t i = 3; i < 7; ++i) EXPECT_TRUE(second[i].is_accumulator) << Describe(second);
  EXPECT_FALSE(AccumulatorsFollowProducers(second)) << Describe(second);
  // The first pass still interleaves (the accumulators were just created),
  // which is why a plain engine only goes wrong from iteration two on.
  EXPECT_TRUE(AccumulatorsFollowProducers(first)) << Describe(first);
}

TEST(EngineOrder, PrioritySwitchIsRestored) {
  const bool before = Engine::Get().PrioritiesEnabled();
  {
    ScopedPriorities off(false);
    EXPECT_FALSE(Engine::Get().PrioritiesEnabled());
  }
  EXPECT_EQ(Engine::Get().PrioritiesEnabled(), before);
  EXPECT_TRUE(before);  // the default
}

TEST(EngineOrder, SequenceNumbersIncreaseAndAccumulatorsHaveTopPriority) {
  Variable x(Tensor::Scalar(1.0f), true, "x");
  Variable y = Scale(x, 2.0f);
  Variable z = Scale(y, 2.0f);
  EXPECT_LT(y.grad_fn()->sequence_nr(), z.grad_fn()->sequence_nr());
  EXPECT_EQ(y.grad_fn()->priority(), kDefaultPriority);
  EXPECT_EQ(x.grad_accumulator()->priority(), kAccumulateGradPriority);
  EXPECT_EQ(x.grad_accumulator().get(), x.grad_accumulator().get());  // created once
}

}  // namespace
}  // namespace psync::autograd
