// gpt_logits WEIGHTS IDS OUT.safetensors: the logits [1, T, V] of a GPT read
// by checkpoint::ReadModelWeights (any file psync-sample reads, HF's layout
// included) for the comma-separated token ids IDS, written as "logits"; for
// the worker_it hf_transformers case (hf_gpt2.py check-logits compares them
// with transformers' GPT2LMHeadModel). Exit 1 with a message on any error.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "psync/autograd/grad_mode.h"
#include "worker/checkpoint/model_config.h"
#include "worker/checkpoint/weights.h"
#include "psync/nn/models/registry.h"
#include "psync/nn/state_dict.h"
#include "worker/safetensors/safetensors.h"

int main(int argc, char** argv) {
  using namespace psync;
  if (argc != 4) {
    std::fprintf(stderr, "usage: gpt_logits WEIGHTS IDS OUT.safetensors\n");
    return 1;
  }
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "gpt_logits: %s\n", m.c_str());
    return 1;
  };
  absl::StatusOr<checkpoint::ModelWeights> w = checkpoint::ReadModelWeights(argv[1]);
  if (!w.ok()) return fail(std::string(w.status().message()));
  absl::StatusOr<nn::ModelOptions> mo = checkpoint::DecodeModelConfig(w->model, argv[1]);
  if (!mo.ok()) return fail(std::string(mo.status().message()));
  absl::StatusOr<std::unique_ptr<nn::Model>> model = nn::Models().Create("gpt", *mo);
  if (!model.ok()) return fail(std::string(model.status().message()));
  std::map<std::string, Tensor> state(w->params.begin(), w->params.end());
  if (absl::Status st = nn::LoadStateDict(**model, state); !st.ok()) return fail(std::string(st.message()));
  std::vector<int64_t> ids;
  for (absl::string_view s : absl::StrSplit(argv[2], ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(s, &v)) return fail("bad id list");
    ids.push_back(v);
  }
  autograd::NoGradGuard no_grad;
  Tensor idx = Tensor::FromVector(ids, {1, static_cast<int64_t>(ids.size())});
  Tensor logits = (*model)->Forward(autograd::Variable(idx)).data().Contiguous();
  if (absl::Status st = safetensors::Write(argv[3], {{"logits", logits}}, {}); !st.ok()) {
    return fail(std::string(st.message()));
  }
  return 0;
}
