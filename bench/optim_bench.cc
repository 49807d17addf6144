// psync-optim-bench: time of one optimizer step over the parameters of a
// GPT (the layout: wte, wpe, per block ln_1, c_attn, c_proj, ln_2,
// c_fc, mlp c_proj, then ln_f), to compare with bench/torch_optim.py on the
// same shapes. See bench/run_optim_bench.sh.
//
//   psync-optim-bench --vocab-size=256 --block-size=64 --n-layer=4 --n-embd=128 --steps=50
//
// Times, per step (median over --steps after --warmup): AdamW, SGD with
// momentum, ClipGradNorm (norm + scale), each over every parameter.
// Prints "RESULT impl=psync op=<op> median_ms=... mean_ms=... min_ms=... gbps=..."
// (gbps: bytes each step must read and write / median time).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "psync/optim/clip.h"
#include "psync/optim/registry.h"
#include "worker/tensor/cuda/cuda_device.h"
#include "psync/tensor/device.h"
#include "psync/tensor/ops.h"

ABSL_FLAG(int, vocab_size, 256, "V");
ABSL_FLAG(int, block_size, 64, "T");
ABSL_FLAG(int, n_layer, 4, "L");
ABSL_FLAG(int, n_embd, 128, "C");
ABSL_FLAG(int, steps, 50, "timed steps");
ABSL_FLAG(int, warmup, 5, "untimed steps first");
ABSL_FLAG(std::string, device, "cpu", "cpu | cuda | cuda:N");

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::pair<std::string, psync::Shape>> GptShapes(int64_t V, int64_t T, int64_t L, int64_t C) {
  std::vector<std::pair<std::string, psync::Shape>> s = {{"wte.weight", {V, C}}, {"wpe.weight", {T, C}}};
  for (int64_t i = 0; i < L; ++i) {
    const std::string h = absl::StrCat("h.", i, ".");
    s.push_back({h + "ln_1.weight", {C}});
    s.push_back({h + "ln_1.bias", {C}});
    s.push_back({h + "attn.c_attn.weight", {3 * C, C}});
    s.push_back({h + "attn.c_attn.bias", {3 * C}});
    s.push_back({h + "attn.c_proj.weight", {C, C}});
    s.push_back({h + "attn.c_proj.bias", {C}});
    s.push_back({h + "ln_2.weight", {C}});
    s.push_back({h + "ln_2.bias", {C}});
    s.push_back({h + "mlp.c_fc.weight", {4 * C, C}});
    s.push_back({h + "mlp.c_fc.bias", {4 * C}});
    s.push_back({h + "mlp.c_proj.weight", {C, 4 * C}});
    s.push_back({h + "mlp.c_proj.bias", {C}});
  }
  s.push_back({"ln_f.weight", {C}});
  s.push_back({"ln_f.bias", {C}});
  return s;
}

psync::Tensor Random(const psync::Shape& shape, std::mt19937& rng, psync::Device d, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(psync::NumelOf(shape)));
  for (float& x : v) x = dist(rng);
  return psync::Tensor::FromVector(v, shape, d);
}

struct Stats {
  double median, mean, min;
};
Stats Summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size()), ms.front()};
}

}  // namespace

int main(int argc, char** argv) {
  const psync::ParsedArgs args = psync::ParseFlagsOrExit(
      "psync-optim-bench", "psync-optim-bench [flags]  (optimizer step time over a GPT's parameters)", argc, argv,
      psync::FlagsDefinedIn(__FILE__));
  if (!args.positional.empty()) psync::ExitBadFlag("psync-optim-bench", "unexpected argument '" + args.positional.front() + "'");
  const int steps = absl::GetFlag(FLAGS_steps), warmup = absl::GetFlag(FLAGS_warmup);
  for (auto [name, v] : {std::pair<const char*, int>{"vocab-size", absl::GetFlag(FLAGS_vocab_size)},
                         {"block-size", absl::GetFlag(FLAGS_block_size)}, {"n-layer", absl::GetFlag(FLAGS_n_layer)},
                         {"n-embd", absl::GetFlag(FLAGS_n_embd)}, {"steps", steps}}) {
    if (v <= 0) psync::ExitBadFlag("psync-optim-bench", absl::StrCat("--", name, " must be positive"));
  }
  if (warmup < 0) psync::ExitBadFlag("psync-optim-bench", "--warmup must be >= 0");
  absl::StatusOr<psync::Device> device = psync::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) psync::ExitBadFlag("psync-optim-bench", std::string(device.status().message()));
  if (absl::Status st = psync::CheckDeviceAvailable(*device); !st.ok()) {
    psync::ExitBadFlag("psync-optim-bench", std::string(st.message()));
  }
  if (device->is_cuda()) psync::cuda_device::SetCurrentDevice(device->index);

  std::mt19937 rng(0);
  psync::optim::NamedParams params;
  int64_t numel = 0;
  for (const auto& [name, shape] : GptShapes(absl::GetFlag(FLAGS_vocab_size), absl::GetFlag(FLAGS_block_size),
                                             absl::GetFlag(FLAGS_n_layer), absl::GetFlag(FLAGS_n_embd))) {
    psync::autograd::Variable p(Random(shape, rng, *device, 0.02f), true, name);
    p.set_grad(Random(shape, rng, *device, 1e-3f));
    params.emplace_back(name, p);
    numel += psync::NumelOf(shape);
  }
  std::printf("psync-optim-bench: %zu parameters, %lld elements, device %s\n", params.size(),
              static_cast<long long>(numel), device->ToString().c_str());

  psync::optim::OptimizerOptions adamw_options;
  adamw_options.weight_decay = 0.1;
  psync::optim::OptimizerOptions sgd_options;
  sgd_options.momentum = 0.9;
  auto adamw = psync::optim::Optimizers().Create("adamw", {params, adamw_options});
  auto sgd = psync::optim::Optimizers().Create("sgd", {params, sgd_options});
  if (!adamw.ok() || !sgd.ok()) {
    std::fprintf(stderr, "psync-optim-bench: %s\n", (!adamw.ok() ? adamw.status() : sgd.status()).ToString().c_str());
    return 1;
  }
  // Bytes each step must move: AdamW reads p, g, m, v and writes p, m, v;
  // SGD with momentum reads p, g, buf and writes p, buf; clipping reads g
  // twice (norm, then scale) and writes it once (a max_norm below the norm).
  struct Op {
    const char* name;
    double bytes_per_elem;
    std::function<absl::Status()> run;
  };
  const std::vector<Op> ops = {
      {"adamw", 7 * 4, [&] { return (*adamw)->Step(1e-4); }},
      {"sgd_momentum", 5 * 4, [&] { return (*sgd)->Step(1e-4); }},
      {"clip_grad_norm",
       3 * 4,
       [&] {
         // A threshold far above the norm would skip the scaling; this one is below it.
         return psync::optim::ClipGradNorm(params, 1e-9).status();
       }},
  };
  for (const Op& op : ops) {
    std::vector<double> ms;
    for (int i = 0; i < warmup + steps; ++i) {
      const auto t0 = Clock::now();
      absl::Status st = op.run();
      psync::ops::Synchronize(*device);
      const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (!st.ok()) {
        std::fprintf(stderr, "psync-optim-bench: %s: %s\n", op.name, st.ToString().c_str());
        return 1;
      }
      if (i >= warmup) ms.push_back(t);
      // Keep the grads finite and non-trivial after repeated clipping.
      if (std::string(op.name) == "clip_grad_norm") {
        for (auto& [n, p] : params) psync::ops::ScaleInPlace(p.grad(), 1e9f);
      }
    }
    const Stats s = Summarize(ms);
    std::printf("RESULT impl=psync op=%s median_ms=%.4f mean_ms=%.4f min_ms=%.4f gbps=%.2f\n", op.name, s.median,
                s.mean, s.min, op.bytes_per_elem * static_cast<double>(numel) / (s.median * 1e6));
  }
  return 0;
}
