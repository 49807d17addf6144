// Float64 gradient checks of the GPT's layers (Embedding, LayerNorm, Gelu,
// CausalSoftmax; include/psync/autograd/nn_functions.h), each on several shapes
// (T = 1, odd sizes, leading batch dims), alone and composed into an
// attention head and a transformer block; plus what the nodes save, where
// they write gradients, and their error messages.
#include "psync/autograd/nn_functions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/unit/autograd/gradcheck.h"
#include "worker/autograd/accumulate_grad.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/view_functions.h"

namespace psync::autograd {
namespace {

using testing::GradOk;
using testing::GradCheckOptions;
using testing::RandomDouble;

Tensor Ids(const std::vector<int64_t>& v, const Shape& shape) { return Tensor::FromVector(v, shape); }

TEST(NnFunctions, EmbeddingGradCheckWithRepeatedIds) {
  // Ids repeat (5 three times, 0 twice), some rows are never used (their
  // gradient is 0), ids have two dims.
  const Tensor ids = Ids({5, 0, 5, 2, 0, 5}, {2, 3});
  EXPECT_TRUE(GradOk([&](const std::vector<Variable>& v) { return Embedding(ids, v[0]); },
                        {RandomDouble({7, 4}, 1)}));
  // One id, one column; a 0-dim id gives a [C] row.
  EXPECT_TRUE(GradOk([&](const std::vector<Variable>& v) { return Embedding(Ids({2}, {1}), v[0]); },
                        {RandomDouble({3, 1}, 2)}));
  EXPECT_TRUE(GradOk([&](const std::vector<Variable>& v) { return Embedding(Ids({1}, {}), v[0]); },
                        {RandomDouble({3, 5}, 3)}));
  // Token + position embeddings, as in the GPT (wpe looked up with [B, T] positions).
  const Tensor tokens = Ids({3, 3, 1, 0, 3, 2}, {2, 3}), positions = Ids({0, 1, 2, 0, 1, 2}, {2, 3});
  EXPECT_TRUE(GradOk(
      [&](const std::vector<Variable>& v) { return Add(Embedding(tokens, v[0]), Embedding(positions, v[1])); },
      {RandomDouble({4, 6}, 4), RandomDouble({3, 6}, 5)}));
}

TEST(NnFunctions, EmbeddingBackwardSumsRepeatsAndZeroesUnusedRows) {
  Variable w(RandomDouble({4, 3}, 6), true, "w");
  // out[i] = w[ids[i]]; d sum(out * g) / d w[v] = sum of g rows with id v.
  const Tensor ids = Ids({1, 3, 1, 1}, {4});
  const Tensor g = Tensor::FromVector(std::vector<double>{1, 2, 3, 10, 20, 30, 100, 200, 300, 1000, 2000, 3000}, {4, 3});
  ASSERT_TRUE(Backward(Sum(Mul(Embedding(ids, w), Variable(g)))).ok());
  EXPECT_EQ(w.grad().ToVector<double>(),
            (std::vector<double>{0, 0, 0, 1101, 2202, 3303, 0, 0, 0, 10, 20, 30}));
}

TEST(NnFunctions, TiedEmbeddingAndOutputHeadSumBothGradients) {
  // The GPT ties wte: Embedding(idx, wte) ... logits = x @ wte^T. The leaf's
  // gradient destination goes to one producer; the sum is the same as without it.
  const Tensor ids = Ids({2, 0, 2}, {3});
  auto loss_of = [&](const Variable& wte) {
    Variable x = Embedding(ids, wte);                        // [3, 4]
    Variable logits = Linear(Gelu(x), wte, Variable());      // [3, 5]
    return CrossEntropyLoss(logits, Ids({1, 4, 2}, {3}));
  };
  EXPECT_TRUE(GradOk([&](const std::vector<Variable>& v) { return loss_of(v[0]); }, {RandomDouble({5, 4}, 7)}));
  Variable a(RandomDouble({5, 4}, 8), true, "a"), b(a.data().Clone(), true, "b");
  Tensor dest = Tensor::Full({5, 4}, 99.0, kFloat64);
  b.grad_accumulator()->SetGradDestination(dest);
  ASSERT_TRUE(Backward(loss_of(a)).ok());
  ASSERT_TRUE(Backward(loss_of(b)).ok());
  EXPECT_EQ(ops::MaxAbsDiff(a.grad(), b.grad()), 0.0);
}

TEST(NnFunctions, EmbeddingWritesIntoTheGradientDestination) {
  Variable w(Tensor::Zeros({3, 2}), true, "w");
  Tensor flat = Tensor::Full({10}, 7.0f);
  Tensor slot = flat.View(4, {3, 2});
  w.grad_accumulator()->SetGradDestination(slot);
  ASSERT_TRUE(Backward(Sum(Embedding(Ids({2, 2}, {2}), w))).ok());
  EXPECT_TRUE(w.grad().IsSameView(slot));
  EXPECT_EQ(flat.ToVector(), (std::vector<float>{7, 7, 7, 7, 0, 0, 0, 0, 2, 2}));
}

TEST(NnFunctions, LayerNormGradCheck) {
  auto ln = [](const std::vector<Variable>& v) { return LayerNorm(v[0], v[1], v[2]); };
  // Odd C, a single row, leading batch dims, C = 1 (xhat = 0: y = bias).
  for (const Shape& shape : {Shape{3, 5}, Shape{1, 7}, Shape{2, 3, 4}, Shape{4, 1}, Shape{6}}) {
    const int64_t c = shape.back();
    EXPECT_TRUE(GradOk(ln, {RandomDouble(shape, 10, -2, 2), RandomDouble({c}, 11, 0.5, 1.5), RandomDouble({c}, 12)}))
        << ShapeToString(shape);
  }
  // Another eps, and only x requiring grad (weight and bias constant).
  EXPECT_TRUE(GradOk([](const std::vector<Variable>& v) { return LayerNorm(v[0], v[1], v[2], 0.1); },
                        {RandomDouble({2, 6}, 13), RandomDouble({6}, 14), RandomDouble({6}, 15)}));
  GradCheckOptions only_x;
  only_x.constant_inputs = {1, 2};
  EXPECT_TRUE(GradOk(ln, {RandomDouble({3, 4}, 16), RandomDouble({4}, 17), RandomDouble({4}, 18)}, only_x));
  GradCheckOptions only_params;
  only_params.constant_inputs = {0};
  EXPECT_TRUE(GradOk(ln, {RandomDouble({3, 4}, 19), RandomDouble({4}, 20), RandomDouble({4}, 21)}, only_params));
}

TEST(NnFunctions, LayerNormMatchesItsDefinition) {
  const Tensor x = Tensor::FromVector(std::vector<double>{1, 2, 3, 4, -1, 0, 0, 5}, {2, 4});
  const Tensor w = Tensor::FromVector(std::vector<double>{1, 2, 0.5, -1}, {4});
  const Tensor b = Tensor::FromVector(std::vector<double>{0, 1, 0, -2}, {4});
  const std::vector<double> y = LayerNorm(Variable(x), Variable(w), Variable(b)).data().ToVector<double>();
  const std::vector<double> xv = x.ToVector<double>(), wv = w.ToVector<double>(), bv = b.ToVector<double>();
  for (int r = 0; r < 2; ++r) {
    double m = 0, var = 0;
    for (int j = 0; j < 4; ++j) m += xv[r * 4 + j] / 4;
    for (int j = 0; j < 4; ++j) var += (xv[r * 4 + j] - m) * (xv[r * 4 + j] - m) / 4;  // biased
    for (int j = 0; j < 4; ++j) {
      EXPECT_NEAR(y[r * 4 + j], (xv[r * 4 + j] - m) / std::sqrt(var + 1e-5) * wv[j] + bv[j], 1e-14) << r << "," << j;
    }
  }
}

TEST(NnFunctions, LayerNormWritesWeightAndBiasGradsIntoDestinations) {
  Variable x(RandomDouble({3, 4}, 22), true, "x");
  Variable w(RandomDouble({4}, 23), true, "w"), b(RandomDouble({4}, 24), true, "b");
  Variable w2(w.data().Clone(), true, "w2"), b2(b.data().Clone(), true, "b2");
  Tensor flat = Tensor::Zeros({8}, kFloat64);
  w.grad_accumulator()->SetGradDestination(flat.View(0, {4}));
  b.grad_accumulator()->SetGradDestination(flat.View(4, {4}));
  const Tensor g = RandomDouble({3, 4}, 25);
  ASSERT_TRUE(Backward(Sum(Mul(LayerNorm(x, w, b), Variable(g)))).ok());
  ASSERT_TRUE(Backward(Sum(Mul(LayerNorm(x, w2, b2), Variable(g)))).ok());
  EXPECT_TRUE(w.grad().IsSameView(flat.View(0, {4})));
  EXPECT_TRUE(b.grad().IsSameView(flat.View(4, {4})));
  EXPECT_EQ(w.grad().ToVector<double>(), w2.grad().ToVector<double>());
  EXPECT_EQ(b.grad().ToVector<double>(), b2.grad().ToVector<double>());
}

TEST(NnFunctions, GeluGradCheck) {
  auto gelu = [](const std::vector<Variable>& v) { return Gelu(v[0]); };
  EXPECT_TRUE(GradOk(gelu, {RandomDouble({4, 8}, 30, -4, 4)}));
  EXPECT_TRUE(GradOk(gelu, {RandomDouble({7}, 31, -0.1, 0.1)}));
  EXPECT_TRUE(GradOk(gelu, {RandomDouble({2, 3, 5}, 32, -12, 12)}));  // both tails
  EXPECT_TRUE(GradOk(gelu, {RandomDouble({1}, 33)}));
}

TEST(NnFunctions, GeluMatchesTorchsTanhForm) {
  const std::vector<double> xs = {-20, -6, -3, -1, -0.5, -1e-3, 0, 1e-3, 0.5, 1, 3, 6, 20};
  const std::vector<double> y = Gelu(Variable(Tensor::FromVector(xs, {13}))).data().ToVector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const double want = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(y[i], want, 1e-15 * (1 + std::fabs(want))) << "x = " << x;
  }
}

TEST(NnFunctions, CausalSoftmaxGradCheck) {
  // T = 1 (a single position), odd T, batch and head dims, another scale.
  struct C {
    Shape shape;
    double scale;
  };
  for (const C& c : {C{{1, 1}, 1.0}, C{{3, 3}, 0.5}, C{{2, 5, 5}, 0.37}, C{{2, 2, 4, 4}, 1.0 / std::sqrt(8.0)},
                     C{{1, 2, 1, 1}, 2.0}}) {
    EXPECT_TRUE(GradOk([&](const std::vector<Variable>& v) { return CausalSoftmax(v[0], c.scale); },
                          {RandomDouble(c.shape, 40, -3, 3)}))
        << ShapeToString(c.shape) << " scale " << c.scale;
  }
}

TEST(NnFunctions, CausalSoftmaxMasksTheFuture) {
  const Tensor s = RandomDouble({2, 4, 4}, 41, -2, 2);
  const std::vector<double> p = CausalSoftmax(Variable(s), 0.7).data().ToVector<double>();
  const std::vector<double> sv = s.ToVector<double>();
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 4; ++i) {
      double z = 0;
      for (int j = 0; j <= i; ++j) z += std::exp(0.7 * sv[(b * 4 + i) * 4 + j]);
      for (int j = 0; j < 4; ++j) {
        const double want = j <= i ? std::exp(0.7 * sv[(b * 4 + i) * 4 + j]) / z : 0.0;
        EXPECT_NEAR(p[(b * 4 + i) * 4 + j], want, 1e-15) << b << "," << i << "," << j;
        if (j > i) {
          EXPECT_EQ(p[(b * 4 + i) * 4 + j], 0.0);
        }
      }
    }
  }
}

TEST(NnFunctions, AttentionHeadGradCheck) {
  // qkv [B, T, 3C] -> split, heads [B, H, T, hs], causal softmax of q k^T /
  // sqrt(hs), times v, heads merged back: the GPT's attention without c_proj.
  const int64_t B = 2, T = 3, H = 2, hs = 2, C = H * hs;
  EXPECT_TRUE(GradOk(
      [&](const std::vector<Variable>& v) {
        std::vector<Variable> qkv = Split(v[0], {C, C, C}, 2);
        auto heads = [&](const Variable& t) { return Permute(Reshape(t, {B, T, H, hs}), {0, 2, 1, 3}); };
        Variable att = CausalSoftmax(BatchedMatmul(heads(qkv[0]), Transpose(heads(qkv[1]), -2, -1)),
                                     1.0 / std::sqrt(static_cast<double>(hs)));
        Variable y = BatchedMatmul(att, heads(qkv[2]));        // [B, H, T, hs]
        return Reshape(Permute(y, {0, 2, 1, 3}), {B, T, C});  // [B, T, C]
      },
      {RandomDouble({B, T, 3 * C}, 50)}));
}

TEST(NnFunctions, TransformerBlockGradCheck) {
  // x + mlp(ln(x)) with the GPT's MLP, and a LayerNorm in front: every
  // parameter gets its gradient through the real kernels.
  const int64_t B = 2, T = 2, C = 3;
  EXPECT_TRUE(GradOk(
      [&](const std::vector<Variable>& v) {
        Variable h = LayerNorm(v[0], v[1], v[2]);
        Variable m = Linear(Gelu(Linear(h, v[3], v[4])), v[5], v[6]);
        return LayerNorm(Add(v[0], m), v[1], v[2]);
      },
      {RandomDouble({B, T, C}, 60), RandomDouble({C}, 61, 0.5, 1.5), RandomDouble({C}, 62), RandomDouble({4 * C, C}, 63),
       RandomDouble({4 * C}, 64), RandomDouble({C, 4 * C}, 65), RandomDouble({C}, 66)}));
}

TEST(NnFunctions, NodesAreNamedAndReleaseWhatTheySaved) {
  Variable x(RandomDouble({2, 3, 3}, 70), true, "x");
  Variable w(RandomDouble({3}, 71), true, "w"), b(RandomDouble({3}, 72), true, "b");
  Variable table(RandomDouble({4, 3}, 73), true, "table");
  EXPECT_EQ(Embedding(Ids({1}, {1}), table).grad_fn()->name(), "EmbeddingBackward");
  EXPECT_EQ(LayerNorm(x, w, b).grad_fn()->name(), "LayerNormBackward");
  EXPECT_EQ(Gelu(x).grad_fn()->name(), "GeluBackward");
  Variable p = CausalSoftmax(x, 1.0);
  EXPECT_EQ(p.grad_fn()->name(), "CausalSoftmaxBackward");
  ASSERT_TRUE(Backward(Sum(p)).ok());
  absl::Status again = Backward(Sum(p));  // saved probs were released
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_NE(again.message().find("CausalSoftmaxBackward"), std::string::npos) << again;
  // Nothing requires grad: no node.
  EXPECT_EQ(Gelu(Variable(x.data())).grad_fn(), nullptr);
  EXPECT_FALSE(Embedding(Ids({0}, {1}), Variable(table.data())).requires_grad());
}

TEST(NnFunctions, ErrorsNameTheOpAndOperands) {
  Variable table(RandomDouble({4, 3}, 80), true, "table");
  try {
    Embedding(Ids({0, 4}, {2}), table);
    ADD_FAILURE() << "expected TensorError";
  } catch (const TensorError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Embedding"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ids[1] = 4"), std::string::npos) << msg;
  }
  EXPECT_THROW(Embedding(Tensor::FromVector({0.0f}, {1}), table), TensorError);  // float ids
  EXPECT_THROW(LayerNorm(Variable(RandomDouble({2, 3}, 81)), Variable(RandomDouble({4}, 82)),
                         Variable(RandomDouble({3}, 83))),
               TensorError);
  EXPECT_THROW(CausalSoftmax(Variable(RandomDouble({2, 3}, 84)), 1.0), TensorError);
  EXPECT_THROW(LayerNorm(Variable(RandomDouble({2, 3}, 85)), Variable(), Variable()), TensorError);
}

}  // namespace
}  // namespace psync::autograd
