// The GPT's attention choice and padded head: the fused attention (default)
// against the materialized path (logits and every gradient, float32), the
// head over wte padded to a multiple of 128 rows (parameters and state dict
// keep [V, C], logits are the [B, T, V] view of padded rows, whose pad is 0
// and never reaches the loss), and --attention's parsing.
#include "worker/nn/models/gpt.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/view_functions.h"
#include "psync/nn/state_dict.h"
#include "psync/tensor/ops.h"

namespace psync::nn {
namespace {

Tensor RandomIds(int64_t b, int64_t t, int64_t v, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int64_t> ids(static_cast<size_t>(b * t));
  for (int64_t& x : ids) x = std::uniform_int_distribution<int64_t>(0, v - 1)(gen);
  return Tensor::FromVector(ids, {b, t});
}

double RelDiff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.Contiguous().ToVector(), y = b.Contiguous().ToVector();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
  }
  return diff / scale;
}

struct StepResult {
  Tensor logits;
  float loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;
};

StepResult ForwardBackward(const GptConfig& c, const Tensor& ids, const Tensor& targets, bool fused_loss) {
  GPT model(c, Device::CPU(), /*seed=*/3);
  Variable logits = model.Forward(Variable(ids));
  StepResult r;
  r.logits = logits.data().Contiguous();  // before the fused loss writes its gradient over it
  const Variable rows = autograd::Reshape(logits, {-1, c.vocab_size});
  Variable loss = fused_loss ? autograd::FusedCrossEntropyLoss(rows, targets.Reshape({-1}))
                             : autograd::CrossEntropyLoss(rows, targets.Reshape({-1}));
  EXPECT_TRUE(autograd::Backward(loss).ok());
  r.loss = loss.data().Item();
  for (const auto& [name, p] : model.named_parameters()) r.grads.emplace_back(name, p.grad());
  return r;
}

TEST(Gpt, FusedAttentionMatchesTheMaterializedPath) {
  // T = 70: two attention tiles; an odd vocabulary (padded to 128).
  GptConfig c;
  c.vocab_size = 61;
  c.block_size = 70;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  const Tensor ids = RandomIds(3, 70, c.vocab_size, 1), targets = RandomIds(3, 70, c.vocab_size, 2);
  c.attention = GptAttention::kMaterialized;
  const StepResult mat = ForwardBackward(c, ids, targets, false);
  c.attention = GptAttention::kFused;
  const StepResult fused = ForwardBackward(c, ids, targets, true);
  EXPECT_LE(RelDiff(fused.logits, mat.logits), 1e-5);
  EXPECT_NEAR(fused.loss, mat.loss, 1e-5 * std::fabs(mat.loss));
  ASSERT_EQ(fused.grads.size(), mat.grads.size());
  for (size_t i = 0; i < mat.grads.size(); ++i) {
    EXPECT_LE(RelDiff(fused.grads[i].second, mat.grads[i].second), 1e-4) << mat.grads[i].first;
  }
}

TEST(Gpt, HeadRunsOverPaddedRowsThatNeverLeave) {
  GptConfig c;
  c.vocab_size = 200;  // padded to 256
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  GPT model(c, Device::CPU(), 5);
  for (const auto& [name, t] : StateDict(model)) {
    if (name == "wte.weight") {
      EXPECT_EQ(t.shape(), (Shape{200, 8}));
    }
  }
  Variable logits = model.Forward(Variable(RandomIds(2, 8, 200, 6)));
  ASSERT_EQ(logits.shape(), (Shape{2, 8, 200}));
  EXPECT_EQ(logits.data().stride(1), 256) << "logits rows are the padded head's";
  // The pad columns beyond the view hold 0 (zero weight rows) and the
  // parameter's storage rows past V stay 0.
  const float* row = logits.data().data<float>();
  for (int64_t j = 200; j < 256; ++j) EXPECT_EQ(row[j], 0.0f) << j;
  Variable loss = autograd::FusedCrossEntropyLoss(autograd::Reshape(logits, {-1, 200}), RandomIds(2, 8, 200, 7).Reshape({-1}));
  ASSERT_TRUE(autograd::Backward(loss).ok());
  for (const auto& [name, p] : model.named_parameters()) {
    if (name == "wte.weight") {
      EXPECT_EQ(p.grad().shape(), (Shape{200, 8}));
    }
  }
  for (int64_t j = 200; j < 256; ++j) EXPECT_EQ(row[j], 0.0f) << "the fused loss wrote into the pad at " << j;
}

TEST(Gpt, AttentionNames) {
  EXPECT_EQ(*ParseGptAttention("fused"), GptAttention::kFused);
  EXPECT_EQ(*ParseGptAttention("materialized"), GptAttention::kMaterialized);
  absl::StatusOr<GptAttention> bad = ParseGptAttention("flash");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--attention=flash"), std::string::npos) << bad.status();
  EXPECT_STREQ(GptAttentionName(GptAttention::kMaterialized), "materialized");
}

}  // namespace
}  // namespace psync::nn
