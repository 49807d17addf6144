// psync's optimizers against PyTorch 1.13 (Debian's /usr/bin/python3 with
// python3-torch; skipped without it): the same parameters, gradients,
// clipping and schedule, run by tests/unit/optim/torch_optim_reference.py
// with torch.optim.AdamW / torch.optim.SGD (foreach=False) and
// torch.nn.utils.clip_grad_norm_.
//
// Without clipping the update kernels round exactly as torch's, so final
// parameters, moments, momentum buffers and step counts must be bitwise
// equal. With clipping torch computes the norm and the coefficient in
// float32 (psync: double), so there the bound is float32 round-off:
// max |psync - torch| <= 1e-6 * (1 + max |torch|) per tensor.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/optim/optim_test_util.h"
#include "psync/optim/adamw.h"
#include "psync/optim/registry.h"
#include "psync/optim/sgd.h"
#include "worker/safetensors/safetensors.h"

namespace psync::optim {
namespace {

using testing::Compare;
using testing::Diff;
using testing::RunConfig;

std::string Json(const std::string& optimizer, const OptimizerOptions& o, const RunConfig& c,
                 const NamedParams& params) {
  std::vector<std::string> names;
  for (const auto& [n, p] : params) names.push_back(absl::StrCat("\"", n, "\""));
  auto num = [](double v) { return absl::StrFormat("%.17g", v); };
  return absl::StrCat("{\"optimizer\":\"", optimizer, "\",\"params\":[", absl::StrJoin(names, ","),
                      "],\"steps\":", c.steps, ",\"lr\":", num(c.lr), ",\"schedule\":\"", c.schedule,
                      "\",\"warmup\":", c.warmup, ",\"clip\":", num(c.clip), ",\"beta1\":", num(o.beta1),
                      ",\"beta2\":", num(o.beta2), ",\"eps\":", num(o.eps), ",\"weight_decay\":", num(o.weight_decay),
                      ",\"momentum\":", num(o.momentum), "}");
}

struct Case {
  std::string optimizer;
  OptimizerOptions options;
  RunConfig run;
  bool bitwise;  // else within float32 round-off
};

OptimizerOptions AdamWOptions(double wd) {
  OptimizerOptions o;  // beta1 0.9, beta2 0.95, eps 1e-8: the flag defaults
  o.weight_decay = wd;
  return o;
}

// Every case, by test name.
const std::map<std::string, Case>& Cases() {
  static const std::map<std::string, Case>* cases = [] {
    auto* m = new std::map<std::string, Case>;
    RunConfig c;
    c.steps = 20;
    c.lr = 1e-3;
    (*m)["adamw"] = {"adamw", AdamWOptions(0.1), c, true};

    c.lr = 3e-3;
    c.schedule = "cosine";
    c.warmup = 5;
    OptimizerOptions o = AdamWOptions(0.05);
    o.beta1 = 0.8;
    o.beta2 = 0.99;
    o.eps = 1e-6;
    (*m)["adamw_cosine"] = {"adamw", o, c, true};

    c.lr = 1e-3;
    c.warmup = 3;
    c.clip = 1.0;
    (*m)["adamw_clip"] = {"adamw", AdamWOptions(0.1), c, false};

    c = RunConfig{};
    c.steps = 20;
    c.lr = 0.05;
    o = OptimizerOptions{};
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    (*m)["sgd_momentum"] = {"sgd", o, c, true};

    c.steps = 10;
    c.lr = 0.1;
    (*m)["sgd"] = {"sgd", OptimizerOptions{}, c, true};

    c.steps = 12;
    c.lr = 0.05;
    c.clip = 2.0;
    o = OptimizerOptions{};
    o.momentum = 0.5;
    (*m)["sgd_clip"] = {"sgd", o, c, false};
    return m;
  }();
  return *cases;
}

// Writes every case's inputs, runs the reference script once (one torch
// import: slow on a loaded machine), reads every case's outputs.
class OptimTorch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (test_support::SpawnAndCapture({"/usr/bin/python3", "-c", "import torch"}, std::chrono::seconds(120)).code !=
        0) {
      skip_ = "/usr/bin/python3 cannot import torch (apt-get install python3-torch)";
      return;
    }
    test_support::TempDir dir("psync_optim_torch");
    std::vector<std::string> argv = {"/usr/bin/python3", PSYNC_TORCH_OPTIM_SCRIPT};
    for (const auto& [name, c] : Cases()) {
      const NamedParams params = testing::MakeParams();
      NamedTensors in;
      for (const auto& [n, p] : params) in.emplace_back("param." + n, p.data());
      for (int s = 0; s < c.run.steps; ++s) {
        for (size_t k = 0; k < params.size(); ++k) {
          Tensor g = testing::GradFor(params, k, s, Device::CPU());
          if (g.defined()) in.emplace_back(absl::StrCat("grad.", s, ".", params[k].first), g);
        }
      }
      const std::string in_path = dir.File(name + ".in"), out_path = dir.File(name + ".out");
      absl::Status st = safetensors::Write(in_path, in, {{"config", Json(c.optimizer, c.options, c.run, params)}});
      if (!st.ok()) {
        error_ = st.ToString();
        return;
      }
      argv.push_back(in_path);
      argv.push_back(out_path);
    }
    test_support::SpawnResult r = test_support::SpawnAndCapture(argv, std::chrono::seconds(240));
    if (r.code != 0) {
      error_ = absl::StrCat("reference script failed (", r.code, "):\n", r.output);
      return;
    }
    for (const auto& [name, c] : Cases()) {
      absl::StatusOr<NamedTensors> out = safetensors::Read(dir.File(name + ".out"));
      if (!out.ok()) {
        error_ = out.status().ToString();
        return;
      }
      for (auto& [n, t] : *out) results_[name][n] = t;
    }
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(error_.empty()) << error_;
  }

  // Runs psync's optimizer on the case's inputs and compares everything the
  // reference wrote.
  static void Check(const std::string& case_name) {
    const Case& c = Cases().at(case_name);
    const std::map<std::string, Tensor>& torch = results_.at(case_name);
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizers().Create(c.optimizer, {testing::MakeParams(), c.options});
    ASSERT_TRUE(opt.ok()) << opt.status();
    const std::vector<double> norms = testing::Train(**opt, c.run, 0, c.run.steps, Device::CPU());

    double worst = 0;
    int64_t differing = 0;
    int compared = 0;
    for (const auto& [name, mine] : testing::Snapshot(**opt)) {
      auto it = torch.find(name);
      if (it == torch.end()) {
        ADD_FAILURE() << "torch wrote no " << name;
        continue;
      }
      if (c.optimizer == "sgd" && absl::EndsWith(name, ".step")) continue;  // torch's SGD keeps no count
      const Diff d = Compare(mine, it->second);
      ++compared;
      worst = std::max(worst, d.max_abs);
      differing += d.bits_differ;
      if (c.bitwise) {
        EXPECT_EQ(d.bits_differ, 0) << name << ": max |diff| " << d.max_abs;
      } else {
        if (it->second.dtype() == kInt64) {
          EXPECT_EQ(d.bits_differ, 0) << name;  // step counts
          continue;
        }
        double scale = 0;
        for (float v : it->second.ToVector()) scale = std::max(scale, static_cast<double>(std::fabs(v)));
        EXPECT_LE(d.max_abs, 1e-6 * (1 + scale)) << name;
      }
    }
    EXPECT_GT(compared, 0);
    // The schedule's rates: the same double expression, so the same bits.
    absl::StatusOr<LrSchedule> sched = LrSchedule::Create(c.run.schedule, c.run.lr, c.run.warmup, c.run.steps);
    ASSERT_TRUE(sched.ok()) << sched.status();
    std::vector<double> lrs;
    for (int i = 0; i < c.run.steps; ++i) lrs.push_back(sched->At(i));
    EXPECT_EQ(Compare(Tensor::FromVector(lrs, {c.run.steps}), torch.at("lr")).bits_differ, 0);
    double norm_rel = 0;
    if (c.run.clip > 0) {
      const std::vector<double> tn = torch.at("norm").ToVector<double>();
      ASSERT_EQ(tn.size(), norms.size());
      for (size_t i = 0; i < tn.size(); ++i) {
        norm_rel = std::max(norm_rel, std::fabs(norms[i] - tn[i]) / tn[i]);
        EXPECT_NEAR(norms[i], tn[i], 1e-6 * tn[i]) << "step " << i;
      }
    }
    const std::string clip = c.run.clip > 0 ? absl::StrFormat(", clip norm max rel diff %.3g", norm_rel) : "";
    std::printf("[ torch ] %s: %s %d steps: max |psync - torch| = %.3g over %d tensors, %lld elements differ in bits%s\n",
                case_name.c_str(), c.optimizer.c_str(), c.run.steps, worst, compared,
                static_cast<long long>(differing), clip.c_str());
  }

  static std::string skip_, error_;
  static std::map<std::string, std::map<std::string, Tensor>> results_;
};

std::string OptimTorch::skip_, OptimTorch::error_;
std::map<std::string, std::map<std::string, Tensor>> OptimTorch::results_;

TEST_F(OptimTorch, AdamWIsBitwiseTorch) { Check("adamw"); }
TEST_F(OptimTorch, AdamWWithCosineWarmupIsBitwiseTorch) { Check("adamw_cosine"); }
TEST_F(OptimTorch, AdamWWithClippingMatchesTorchToFloatRoundOff) { Check("adamw_clip"); }
TEST_F(OptimTorch, SgdMomentumWeightDecayIsBitwiseTorch) { Check("sgd_momentum"); }
TEST_F(OptimTorch, PlainSgdIsBitwiseTorch) { Check("sgd"); }
TEST_F(OptimTorch, SgdWithClippingMatchesTorchToFloatRoundOff) { Check("sgd_clip"); }

}  // namespace
}  // namespace psync::optim
