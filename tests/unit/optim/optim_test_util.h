// Helpers shared by the optimizer tests: a fixed set of parameters of every
// kind the contract distinguishes (>= 2-D, 1-D, 0-D, a parameter that skips
// some steps, one that never gets a grad), deterministic gradients, and a
// training loop (grads -> clip -> schedule -> step).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "psync/optim/clip.h"
#include "psync/optim/optimizer.h"
#include "psync/optim/schedule.h"
#include "psync/tensor/ops.h"

namespace psync::optim::testing {

struct ParamSpec {
  std::string name;
  Shape shape;
};

// "sometimes" has no grad on steps s % 3 == 1, "never" on any step.
inline std::vector<ParamSpec> Specs() {
  return {{"w2d", {16, 33}},  {"b1d", {33}},    {"w3d", {3, 4, 5}}, {"big", {64, 300}},
          {"scalar", {}},      {"sometimes", {5, 7}}, {"never", {4, 4}}, {"tail", {7}}};
}

inline bool HasGrad(const std::string& name, int step) {
  if (name == "never") return false;
  if (name == "sometimes") return step % 3 != 1;
  return true;
}

inline std::vector<float> Uniform(int64_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen) * scale;
  return v;
}

inline NamedParams MakeParams(Device device = Device::CPU(), uint32_t seed = 1) {
  NamedParams out;
  uint32_t k = 0;
  for (const ParamSpec& s : Specs()) {
    Tensor t = Tensor::FromVector(Uniform(NumelOf(s.shape), seed * 1000 + k++, 0.5f), s.shape, device);
    out.emplace_back(s.name, autograd::Variable(t, /*requires_grad=*/true, s.name));
  }
  return out;
}

// The gradient of parameter k at `step` (undefined when it has none). Every
// 4th step the grads are tiny, so a clip threshold near 1 is inactive there.
inline Tensor GradFor(const NamedParams& params, size_t k, int step, Device device) {
  const auto& [name, p] = params[k];
  if (!HasGrad(name, step)) return Tensor();
  const float scale = step % 4 == 0 ? 1e-3f : 1.0f + 0.25f * static_cast<float>(k);
  return Tensor::FromVector(Uniform(p.data().numel(), 7919u * static_cast<uint32_t>(step) + static_cast<uint32_t>(k), scale),
                            p.data().shape(), device);
}

inline void SetGrads(const NamedParams& params, int step, Device device) {
  for (size_t k = 0; k < params.size(); ++k) params[k].second.set_grad(GradFor(params, k, step, device));
}

struct RunConfig {
  int steps = 20;
  double clip = 0;  // 0: off
  std::string schedule = "constant";
  double lr = 1e-3;
  int64_t warmup = 0;
};

// Steps [first, last) of the loop; returns the clip norms.
inline std::vector<double> Train(Optimizer& opt, const RunConfig& c, int first, int last, Device device) {
  absl::StatusOr<LrSchedule> sched = LrSchedule::Create(c.schedule, c.lr, c.warmup, c.steps);
  EXPECT_TRUE(sched.ok()) << sched.status();
  std::vector<double> norms;
  for (int s = first; s < last; ++s) {
    SetGrads(opt.params(), s, device);
    if (c.clip > 0) {
      absl::StatusOr<double> norm = ClipGradNorm(opt.params(), c.clip);
      EXPECT_TRUE(norm.ok()) << norm.status();
      norms.push_back(norm.value_or(0));
    }
    absl::Status st = opt.Step(sched->At(s));
    EXPECT_TRUE(st.ok()) << st;
    opt.ZeroGrad();
  }
  return norms;
}

// Max |a - b| and how many elements differ in their bits (same dtype).
struct Diff {
  double max_abs = 0;
  int64_t bits_differ = 0;
};
inline Diff Compare(const Tensor& a, const Tensor& b) {
  Diff d;
  const Tensor ha = a.To(Device::CPU()).Contiguous(), hb = b.To(Device::CPU()).Contiguous();
  EXPECT_EQ(ha.shape(), hb.shape());
  EXPECT_EQ(ha.dtype(), hb.dtype());
  if (ha.shape() != hb.shape() || ha.dtype() != hb.dtype()) return {INFINITY, 1};
  const size_t es = ha.element_size();
  const char* pa = static_cast<const char*>(ha.raw_data());
  const char* pb = static_cast<const char*>(hb.raw_data());
  for (int64_t i = 0; i < ha.numel(); ++i) {
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0) ++d.bits_differ;
  }
  if (ha.dtype() == kFloat32 || ha.dtype() == kFloat64) d.max_abs = ops::MaxAbsDiff(ha, hb);
  return d;
}

// Bitwise copies of every parameter and state entry, on the host.
inline NamedTensors Snapshot(const Optimizer& opt) {
  NamedTensors out;
  for (const auto& [name, p] : opt.params()) out.emplace_back("param." + name, p.data().To(Device::CPU()).Clone());
  for (const auto& [name, t] : opt.State()) out.emplace_back("state." + name, t.To(Device::CPU()).Clone());
  return out;
}

}  // namespace psync::optim::testing
