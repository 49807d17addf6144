// llama_gradcheck: psync::autograd::GradCheck (float64 finite differences) of
// every custom function of this example and of a tiny whole Llama forward.
// Prints one line per check; exit 0 when all pass, 1 otherwise.
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <psync/psync.h>

#include "llama_model.h"
#include "repeat_kv.h"
#include "rms_norm.h"
#include "rope.h"
#include "silu.h"

namespace {

using psync::Tensor;
using psync::autograd::GradCheck;
using psync::autograd::RandomDouble;
using psync::autograd::Variable;

int failures = 0;

void Report(const std::string& what, const absl::Status& st) {
  std::printf("%-58s %s\n", what.c_str(), st.ok() ? "ok" : std::string(st.message()).c_str());
  if (!st.ok()) ++failures;
}

// The tiny model: GQA with 2 query heads per kv head, 2 layers, every
// parameter checked (norm weights around 1, the rest around 0).
absl::Status WholeModel(const std::set<int>& skip) {
  llama::LlamaConfig c;
  c.vocab_size = 7;
  c.block_size = 5;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 8;
  c.ffn_hidden = 12;
  std::vector<Tensor> inputs;
  uint32_t seed = 100;
  for (const llama::ParamSpec& s : llama::ParameterSpecs(c)) {
    inputs.push_back(s.init == llama::ParamSpec::kOnes ? RandomDouble(s.shape, seed++, 0.5, 1.5)
                                                       : RandomDouble(s.shape, seed++, -0.5, 0.5));
  }
  // Skipped layers' parameters get no gradient: GradCheck leaves them constant.
  psync::autograd::GradCheckOptions opt;
  for (int l : skip) {
    for (int64_t j = 0; j < llama::kParamsPerLayer; ++j) {
      opt.constant_inputs.push_back(1 + l * llama::kParamsPerLayer + j);
    }
  }
  const size_t n = inputs.size();
  inputs.push_back(Tensor::FromVector(std::vector<int64_t>{0, 3, 6, 1, 1, 5, 2, 4, 0, 6}, {2, 5}));  // ids: a constant
  return GradCheck(
      [&](const std::vector<Variable>& v) {
        return llama::LlamaForward(c, std::vector<Variable>(v.begin(), v.begin() + n), v[n].data(), skip);
      },
      inputs, opt);
}

}  // namespace

int main() {
  Report("RmsNorm x [3, 4, 8], weight [8]",
         GradCheck([](const std::vector<Variable>& v) { return llama::RmsNorm(v[0], v[1]); },
                   {RandomDouble({3, 4, 8}, 1, -2, 2), RandomDouble({8}, 2, 0.5, 1.5)}));
  Report("RmsNorm x [5, 3] (eps 0.1), weight [3]",
         GradCheck([](const std::vector<Variable>& v) { return llama::RmsNorm(v[0], v[1], 0.1); },
                   {RandomDouble({5, 3}, 3, -0.3, 0.3), RandomDouble({3}, 4)}));
  Report("Rope x [2, 6, 3, 8], theta 10000",
         GradCheck([](const std::vector<Variable>& v) { return llama::Rope(v[0]); }, {RandomDouble({2, 6, 3, 8}, 5)}));
  Report("Rope x [1, 9, 2, 4], theta 7",
         GradCheck([](const std::vector<Variable>& v) { return llama::Rope(v[0], 7.0); },
                   {RandomDouble({1, 9, 2, 4}, 6)}));
  Report("Silu x [4, 7] in [-6, 6)",
         GradCheck([](const std::vector<Variable>& v) { return llama::Silu(v[0]); }, {RandomDouble({4, 7}, 7, -6, 6)}));
  Report("RepeatKv x [2, 3, 2, 4], groups 3",
         GradCheck([](const std::vector<Variable>& v) { return llama::RepeatKv(v[0], 3); },
                   {RandomDouble({2, 3, 2, 4}, 8)}));
  Report("Rope(RepeatKv x [2, 3, 2, 4], groups 1: identity)",
         GradCheck([](const std::vector<Variable>& v) { return llama::Rope(llama::RepeatKv(v[0], 1)); },
                   {RandomDouble({2, 3, 2, 4}, 9)}));
  Report("Llama forward (V=7 T=5 L=2 H=4 KV=2 C=8 F=12), all params", WholeModel({}));
  Report("Llama forward, layer 0 skipped", WholeModel({0}));
  std::printf("%s\n", failures == 0 ? "all gradient checks passed" : (std::to_string(failures) + " failed").c_str());
  return failures == 0 ? 0 : 1;
}
