// optim::SGD on an MLP against the same computation written out by hand
// (plain loops, float64): forward, MSE loss, backward, and the PyTorch SGD rule.
#include "psync/optim/sgd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "psync/autograd/engine.h"
#include "worker/nn/models/mlp.h"
#include "psync/nn/loss.h"

namespace psync::optim {
namespace {

using autograd::Variable;
using nn::Linear;
using nn::MLP;
using nn::MseLoss;

using Vec = std::vector<double>;

Vec ToVec(const Tensor& t) {
  std::vector<float> f = t.ToVector();
  return Vec(f.begin(), f.end());
}

// The hand-written model: per layer W [out,in], b [out], momentum buffers.
struct HandLayer {
  int in, out;
  Vec w, b;
  Vec buf_w, buf_b;  // empty until the first update
};

struct HandMlp {
  std::vector<HandLayer> layers;

  explicit HandMlp(const MLP& m) {
    for (int i = 0; i < m.num_layers(); ++i) {
      const Linear& l = m.layer(i);
      layers.push_back({static_cast<int>(l.in_features()), static_cast<int>(l.out_features()),
                        ToVec(l.weight().data()), ToVec(l.bias().data()), {}, {}});
    }
  }

  // One step of: loss = mean((mlp(x) - t)^2); SGD. Returns the loss.
  double Step(const Vec& x, const Vec& t, int N, const std::set<int>& skip, double lr, double momentum, double wd) {
    const int L = static_cast<int>(layers.size());
    // Forward, keeping each layer's input and pre-activation.
    std::vector<Vec> inputs(L), pre(L);
    Vec h = x;
    for (int l = 0; l < L; ++l) {
      if (skip.count(l)) continue;
      const HandLayer& layer = layers[l];
      inputs[l] = h;
      Vec z(static_cast<size_t>(N * layer.out));
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < layer.out; ++o) {
          double acc = layer.b[o];
          for (int i = 0; i < layer.in; ++i) acc += h[n * layer.in + i] * layer.w[o * layer.in + i];
          z[n * layer.out + o] = acc;
        }
      pre[l] = z;
      h = z;
      if (l + 1 < L)
        for (double& v : h) v = v > 0 ? v : 0;
    }
    double loss = 0;
    Vec dh(h.size());
    for (size_t j = 0; j < h.size(); ++j) {
      loss += (h[j] - t[j]) * (h[j] - t[j]);
      dh[j] = 2 * (h[j] - t[j]) / static_cast<double>(h.size());
    }
    loss /= static_cast<double>(h.size());
    // Backward.
    std::vector<Vec> gw(L), gb(L);
    for (int l = L - 1; l >= 0; --l) {
      if (skip.count(l)) continue;
      const HandLayer& layer = layers[l];
      Vec dz = dh;
      if (l + 1 < L)
        for (size_t j = 0; j < dz.size(); ++j) dz[j] = pre[l][j] > 0 ? dz[j] : 0;
      gw[l].assign(static_cast<size_t>(layer.out * layer.in), 0.0);
      gb[l].assign(static_cast<size_t>(layer.out), 0.0);
      Vec dx(static_cast<size_t>(N * layer.in), 0.0);
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < layer.out; ++o) {
          const double g = dz[n * layer.out + o];
          gb[l][o] += g;
          for (int i = 0; i < layer.in; ++i) {
            gw[l][o * layer.in + i] += g * inputs[l][n * layer.in + i];
            dx[n * layer.in + i] += g * layer.w[o * layer.in + i];
          }
        }
      dh = dx;
    }
    // SGD (parameters without a gradient are left alone).
    auto update = [&](Vec& p, const Vec& g, Vec& buf) {
      Vec d(p.size());
      for (size_t j = 0; j < p.size(); ++j) d[j] = g[j] + wd * p[j];
      if (momentum != 0) {
        if (buf.empty()) {
          buf = d;
        } else {
          for (size_t j = 0; j < p.size(); ++j) buf[j] = momentum * buf[j] + d[j];
        }
        d = buf;
      }
      for (size_t j = 0; j < p.size(); ++j) p[j] -= lr * d[j];
    };
    for (int l = 0; l < L; ++l) {
      if (skip.count(l)) continue;
      update(layers[l].w, gw[l], layers[l].buf_w);
      update(layers[l].b, gb[l], layers[l].buf_b);
    }
    return loss;
  }
};

Tensor Pattern(const Shape& shape, float a, float b) {
  std::vector<float> v(static_cast<size_t>(NumelOf(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(a * static_cast<float>(i) + b);
  return Tensor::FromVector(v, shape);
}

void ExpectSameWeights(const MLP& mlp, const HandMlp& hand) {
  for (int l = 0; l < mlp.num_layers(); ++l) {
    const Vec w = ToVec(mlp.layer(l).weight().data()), b = ToVec(mlp.layer(l).bias().data());
    for (size_t j = 0; j < w.size(); ++j) EXPECT_NEAR(w[j], hand.layers[l].w[j], 2e-5) << "layer " << l << " w" << j;
    for (size_t j = 0; j < b.size(); ++j) EXPECT_NEAR(b[j], hand.layers[l].b[j], 2e-5) << "layer " << l << " b" << j;
  }
}

OptimizerOptions Options(double momentum, double weight_decay) {
  OptimizerOptions o;
  o.momentum = momentum;
  o.weight_decay = weight_decay;
  return o;
}

struct SgdCase {
  double lr, momentum, wd;
  std::vector<std::set<int>> skips;  // one per step
};

void RunAndCompare(const SgdCase& c) {
  MLP mlp({3, 5, 5, 2}, Device::CPU(), 11);
  HandMlp hand(mlp);
  SGD sgd(mlp.named_parameters(), Options(c.momentum, c.wd));
  const int N = 4;
  const Tensor x = Pattern({N, 3}, 0.7f, 0.1f), t = Pattern({N, 2}, 1.3f, 0.5f);
  for (size_t step = 0; step < c.skips.size(); ++step) {
    sgd.ZeroGrad();
    Variable loss = MseLoss(mlp.Forward(Variable(x), c.skips[step]), t);
    ASSERT_TRUE(autograd::Backward(loss).ok());
    ASSERT_TRUE(sgd.Step(c.lr).ok());
    const double hand_loss = hand.Step(ToVec(x), ToVec(t), N, c.skips[step], c.lr, c.momentum, c.wd);
    EXPECT_NEAR(loss.data().Item(), hand_loss, 1e-5) << "step " << step;
  }
  ExpectSameWeights(mlp, hand);
}

TEST(Sgd, PlainStepsMatchHandWrittenComputation) { RunAndCompare({0.1, 0.0, 0.0, {{}, {}, {}}}); }

TEST(Sgd, MomentumAndWeightDecayMatchHandWrittenComputation) {
  RunAndCompare({0.05, 0.9, 0.01, {{}, {}, {}, {}}});
}

TEST(Sgd, SkippedLayerStepsMatchHandWrittenComputation) {
  // Layer 1 (5x5) is dropped on steps 0 and 2: it gets no grad then, so
  // neither its weights nor its momentum buffer change on those steps.
  RunAndCompare({0.05, 0.9, 0.01, {{1}, {}, {1}, {}}});
}

TEST(Sgd, ParameterWithUndefinedGradIsNotUpdated) {
  MLP mlp({3, 3, 2}, Device::CPU(), 3);
  SGD sgd(mlp.named_parameters(), Options(0.9, 0.1));  // weight decay alone would move it
  const std::vector<float> w0 = mlp.layer(0).weight().data().ToVector();
  Variable loss = MseLoss(mlp.Forward(Variable(Pattern({2, 3}, 0.3f, 0.0f)), {0}), Tensor::Zeros({2, 2}));
  ASSERT_TRUE(autograd::Backward(loss).ok());
  ASSERT_FALSE(mlp.layer(0).weight().grad().defined());
  const std::vector<float> w1_before = mlp.layer(1).weight().data().ToVector();
  ASSERT_TRUE(sgd.Step(0.1).ok());
  EXPECT_EQ(mlp.layer(0).weight().data().ToVector(), w0);
  EXPECT_NE(mlp.layer(1).weight().data().ToVector(), w1_before);
  // The skipped layer's buffer and step count stay as they were.
  EXPECT_EQ(sgd.step_count(0), 0);
  EXPECT_EQ(sgd.step_count(2), 1);
  const NamedTensors state = sgd.State();
  auto entry = [&](const std::string& name) {
    for (const auto& [n, t] : state) {
      if (n == name) return t;
    }
    ADD_FAILURE() << "no state entry " << name;
    return Tensor();
  };
  for (float v : entry("layers.0.weight.momentum_buffer").ToVector()) EXPECT_EQ(v, 0.0f);
  const std::vector<float> buf1 = entry("layers.1.weight.momentum_buffer").ToVector();
  EXPECT_NE(buf1, std::vector<float>(buf1.size(), 0.0f));
}

TEST(Sgd, StepUpdatesInPlaceAndLeavesTheGradAlone) {
  MLP mlp({2, 2}, Device::CPU(), 3);
  Tensor w = mlp.layer(0).weight().data();
  SGD sgd(mlp.named_parameters(), Options(0.0, 0.2));
  Variable loss = MseLoss(mlp.Forward(Variable(Pattern({1, 2}, 0.3f, 0.2f))), Tensor::Zeros({1, 2}));
  ASSERT_TRUE(autograd::Backward(loss).ok());
  const std::vector<float> grad = mlp.layer(0).weight().grad().ToVector();
  const std::vector<float> before = w.ToVector();
  ASSERT_TRUE(sgd.Step(0.5).ok());
  EXPECT_TRUE(mlp.layer(0).weight().data().IsSameView(w));
  EXPECT_EQ(mlp.layer(0).weight().grad().ToVector(), grad);
  const std::vector<float> after = w.ToVector();
  for (size_t j = 0; j < after.size(); ++j) {
    EXPECT_NEAR(after[j], before[j] - 0.5f * (grad[j] + 0.2f * before[j]), 1e-6);
  }
}

}  // namespace
}  // namespace psync::optim
