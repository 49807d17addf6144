// psync-gpt-step-bench: training-step time of psync's GPT (worker/nn/models/
// gpt.h, the model --model=gpt trains): forward + mean cross-entropy over
// all B*T positions + backward + AdamW (lr 3e-4, weight decay 0.1 on >= 2-D
// parameters, betas 0.9/0.95), to compare with bench/gpt_torch.py (the same
// model, data shape, optimizer and thread budget in PyTorch). See
// bench/run_gpt_bench.sh.
//
//   single   one process, the whole --batch, --threads BLAS threads, on
//            --device (cpu, or cuda[:N]: timed after waiting for the GPU)
//   ddp      --world ranks forked on this machine, each on --batch/world
//            sequences (the global batch is split, as psync-launch does;
//            each rank gets --threads BLAS threads), run as:
//              compute       the same per-rank step without communication
//              ddp           DistributedDataParallel over each of --backends
//                            (gloo: TCP on 127.0.0.1; shm: /dev/shm)
//              zero1..zero3  the same with --zero=1 / 2 / 3 (reduce-scatter,
//                            the sharded AdamW, all-gather of the parameters;
//                            3: per module before its forward and backward),
//                            for each stage in --zero (default none)
//
// Per mode: median step time, and the medians of its phases (forward incl.
// the loss, backward incl. the reducer's end-of-backward wait, optimizer),
// process CPU ms per step (all threads), and on the CPU the peak of tensor
// memory in use during a step above what is in use before it (the CPU
// allocator's count: activations, gradients, temporaries).
// --attention=fused|materialized picks the GPT's attention, --fused_classifier
// the loss (FusedCrossEntropyLoss, as psync-worker trains, or CrossEntropyLoss). With --rounds > 1 each mode keeps
// its round with the lowest median. Machine-readable lines:
//   RESULT impl=psync mode=single threads=1 median_ms=... fwd_ms=... bwd_ms=... opt_ms=... cpu_ms=...
//   RESULT impl=psync mode=ddp backend=shm world=2 per_rank_batch=8 median_ms=... exposed_ms=...
//
//   psync-gpt-step-bench --mode=single --threads=2
//   psync-gpt-step-bench --device=cuda --vocab-size=50257 --block-size=1024 --n-layer=12 --n-head=12 --n-embd=768 --batch=8
//            (GPT-2 small on a GPU)
//   psync-gpt-step-bench --mode=ddp --world=2 --backends=gloo,shm
//   --precision=fp32|tf32|bf16 (include/psync/nn/precision.h); --cuda-graph (cuda:
//   the step replayed from a CUDA graph); on CUDA the RESULT lines add
//   tokens_per_s, mfu (against --peak-tflops) and peak_mib (the memory
//   pool's high-water mark)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cblas.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/flags.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/node.h"
#include "psync/autograd/view_functions.h"
#include "worker/comm/file_store.h"
#include "worker/comm/process_group_factory.h"
#include "psync/ddp/ddp.h"
#include "psync/ddp/training_optimizer.h"
#include "psync/nn/init.h"
#include "worker/nn/models/gpt.h"
#include "worker/tensor/cpu/blas_core.h"
#include "worker/tensor/cpu_allocator.h"
#include "worker/tensor/cuda/cuda_device.h"  // SetCurrentDevice, PeakBytes
#include "worker/tensor/cuda/cuda_graph.h"
#include "psync/tensor/device.h"
#include "psync/tensor/ops/copy.h"            // Synchronize
#include "worker/ddp/reducer.h"

ABSL_FLAG(int, vocab_size, 256, "V");
ABSL_FLAG(int, block_size, 64, "T (every sequence is this long)");
ABSL_FLAG(int, n_layer, 4, "L");
ABSL_FLAG(int, n_head, 4, "H");
ABSL_FLAG(int, n_embd, 128, "C");
ABSL_FLAG(int, batch, 16, "global batch (sequences per step); ddp splits it over --world ranks");
ABSL_FLAG(std::string, mode, "single", "single | ddp");
ABSL_FLAG(std::string, device, "cpu", "single: cpu | cuda | cuda:N (ddp runs on the CPU)");
ABSL_FLAG(std::string, precision, "fp32",
          "fp32 | tf32 | bf16 (include/psync/nn/precision.h: bf16 = autocast's rules, float32 master weights)");
ABSL_FLAG(int, threads, 1, "OpenBLAS threads (per rank in ddp)");
ABSL_FLAG(int, world, 2, "ddp: ranks (processes forked on this machine)");
ABSL_FLAG(std::string, backends, "gloo,shm", "ddp: process groups to run DDP over: gloo, shm (comma list)");
ABSL_FLAG(double, bucket_cap_mb, static_cast<double>(psync::kDefaultBucketCapBytes) / (1 << 20), "ddp: bucket cap (MiB)");
ABSL_FLAG(std::string, zero, "", "ddp: also run DDP with these ZeRO stages (comma list of 1, 2, 3; empty = none)");
ABSL_FLAG(int, zero3_prefetch, psync::ddp::ReducerOptions{}.zero3_prefetch, "ddp, --zero=3: buckets gathered ahead");
ABSL_FLAG(int, steps, 20, "timed steps per mode");
ABSL_FLAG(int, warmup, 3, "untimed steps first (allocator pools, BLAS start-up, bucket rebuild)");
ABSL_FLAG(int, rounds, 1, "repeat the modes; each keeps its best median (least disturbed by other load)");
ABSL_FLAG(bool, cuda_graph, false,
          "single, cuda: capture the steady-state step (zero grads, forward, loss, backward) in a CUDA graph and "
          "replay it; the optimizer step runs outside (its scalars change every step)");
ABSL_FLAG(double, peak_tflops, 989.4, "cuda: the GPU's peak (dense bf16 H100/H200: 989.4) for MFU");
ABSL_FLAG(bool, profile, false,
          "single: also time every backward node (engine node observer) and print the total per node kind");
ABSL_FLAG(int, timeout_s, 600, "ddp: whole-run deadline; ranks still running are killed");
ABSL_FLAG(std::string, attention, "fused", "the GPT's attention: fused (flash-style) | materialized ([B,H,T,T] scores)");
ABSL_FLAG(bool, fused_classifier, true,
          "loss: FusedCrossEntropyLoss (gradient written over the logits, as psync-worker) or CrossEntropyLoss");

namespace {

constexpr const char* kName = "psync-gpt-step-bench";
using psync::Tensor;
using psync::autograd::Variable;
using psync::bench::Clock;
using psync::bench::Median;
using psync::bench::Ms;

struct Config {
  psync::nn::GptConfig gpt;
  psync::nn::Precision precision = psync::nn::Precision::kFp32;
  psync::Device device = psync::Device::CPU();  // single mode only
  int batch = 16;  // global
  std::string mode;
  int threads = 1, world = 2;
  std::vector<std::string> backends;
  std::vector<int> zero_stages;  // ddp: extra runs with --zero
  psync::BucketCaps bucket_caps;  // --bucket-cap-mb
  int steps = 20, warmup = 3, rounds = 1;
  bool fused_classifier = true;
  bool cuda_graph = false;
  double peak_tflops = 989.4;
};

struct ModeResult {
  std::string mode;     // single, graph (single with --cuda-graph), compute, ddp, zero1, zero2, zero3
  std::string backend;  // ddp only
  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms;
  double cpu_ms = 0;
  // CPU: the most tensor memory a step added over what was in use before it;
  // cuda: the memory pool's high-water mark over the run.
  double peak_mib = 0;
  double loss = 0;  // after the last step (a sanity check, not a result)
  std::string key() const { return backend.empty() ? mode : mode + "@" + backend; }
};

// Random tokens in [0, V): inputs and targets [b, T] int64 on `device`, a
// stream per rank.
std::pair<Tensor, Tensor> Tokens(const Config& c, int64_t b, int rank, psync::Device device) {
  psync::nn::SplitMix64 rng(1000 + static_cast<uint64_t>(rank));
  const int64_t n = b * c.gpt.block_size;
  std::vector<int64_t> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (auto* v : {&x, &y}) {
    for (int64_t& t : *v) t = static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(c.gpt.vocab_size));
  }
  return {Tensor::FromVector(x, {b, c.gpt.block_size}, device), Tensor::FromVector(y, {b, c.gpt.block_size}, device)};
}

// AdamW computing in c.precision (it writes the bf16 weight copies); with a
// ZeRO reducer the sharded one, attached to its shards.
std::unique_ptr<psync::optim::Optimizer> MakeAdamW(const Config& c, psync::nn::GPT& model,
                                                   psync::ddp::DistributedDataParallel* ddp) {
  auto policy = model.UsePrecision(c.precision);
  psync::optim::OptimizerOptions o;
  o.weight_decay = 0.1;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  // psync-worker's choice (ddp/training_optimizer.h): sharded with --zero.
  const int zero_stage = ddp != nullptr && ddp->reducer().zero_buckets() ? 1 : 0;
  absl::StatusOr<std::unique_ptr<psync::optim::Optimizer>> opt =
      policy.ok() ? psync::ddp::MakeOptimizer("adamw", o, model.named_parameters(), **policy, zero_stage)
                  : policy.status();
  absl::Status st = opt.status();
  if (st.ok() && ddp != nullptr) st = psync::ddp::AttachOptimizer(**opt, *ddp, *policy);
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", kName, st.ToString().c_str());
    std::exit(1);
  }
  return std::move(*opt);
}

// Runs warmup + steps training steps of `model` (on `device`) on b sequences;
// with `ddp`, through its reducer. Returns false (after printing why) on an
// error.
bool TimeSteps(const Config& c, int rank, psync::nn::GPT& model, psync::Device device,
               psync::ddp::DistributedDataParallel* ddp, int64_t b, ModeResult* r) {
  auto opt = MakeAdamW(c, model, ddp);
  auto [x, y] = Tokens(c, b, rank, device);
  // CUDA work is asynchronous: each phase's time ends when the GPU is done.
  auto done = [&] {
    psync::ops::Synchronize(device);
    return Clock::now();
  };
  const Tensor flat_y = y.Reshape({-1});
  double cpu0 = 0;
  psync::CpuCachingAllocator& alloc = psync::CpuCachingAllocator::Get();
  for (int i = 0; i < c.warmup + c.steps; ++i) {
    if (i == c.warmup) cpu0 = psync::bench::CpuMs();
    const size_t in_use = alloc.stats().in_use_bytes;
    alloc.ResetPeak();
    const auto t0 = Clock::now();
    opt->ZeroGrad();
    Variable logits;
    if (ddp != nullptr) {
      ddp->reducer().DeclareIteration(i);
      auto out = ddp->Forward(Variable(x));
      if (!out.ok()) {
        std::fprintf(stderr, "rank %d: forward: %s\n", rank, out.status().ToString().c_str());
        return false;
      }
      logits = *out;
    } else {
      logits = model.Forward(Variable(x));
    }
    const Variable rows = psync::autograd::Reshape(logits, {-1, c.gpt.vocab_size});
    Variable loss = c.fused_classifier ? psync::autograd::FusedCrossEntropyLoss(rows, flat_y)
                                       : psync::autograd::CrossEntropyLoss(rows, flat_y);
    const auto t1 = done();
    absl::Status st = psync::autograd::Backward(loss);
    const auto t2 = done();
    if (st.ok()) st = opt->Step(3e-4);
    const auto t3 = done();
    if (!st.ok()) {
      std::fprintf(stderr, "rank %d: step %d: %s\n", rank, i, st.ToString().c_str());
      return false;
    }
    if (i >= c.warmup) {
      r->step_ms.push_back(Ms(t3 - t0));
      r->fwd_ms.push_back(Ms(t1 - t0));
      r->bwd_ms.push_back(Ms(t2 - t1));
      r->opt_ms.push_back(Ms(t3 - t2));
      if (device.is_cpu()) {
        r->peak_mib = std::max(r->peak_mib, static_cast<double>(alloc.stats().peak_in_use_bytes - in_use) / (1 << 20));
      }
    }
    if (i + 1 == c.warmup + c.steps) r->loss = loss.data().Item();
  }
  r->cpu_ms = (psync::bench::CpuMs() - cpu0) / c.steps;
  return true;
}

// --cuda-graph: warmup steps run eagerly (they allocate the grads and plan
// the products), then one step's zero-grad, forward, loss and backward are
// captured; every timed step replays the graph and runs AdamW (outside: its
// scalars change per step). Grads are zeroed in place (ZeroGrad(false)) so
// backward accumulates into buffers that outlive the graph.
bool TimeStepsGraph(const Config& c, psync::nn::GPT& model, ModeResult* r) {
  auto opt = MakeAdamW(c, model, nullptr);
  auto [x, y] = Tokens(c, c.batch, 0, c.device);
  const Tensor flat_y = y.Reshape({-1});
  Variable loss;
  auto step = [&] {
    opt->ZeroGrad(/*set_to_none=*/false);
    Variable logits = model.Forward(Variable(x));
    loss = psync::autograd::CrossEntropyLoss(psync::autograd::Reshape(logits, {-1, c.gpt.vocab_size}), flat_y);
    absl::Status st = psync::autograd::Backward(loss);
    if (!st.ok()) throw psync::TensorError(std::string(st.message()));
  };
  for (int i = 0; i < c.warmup; ++i) {
    step();
    if (absl::Status st = opt->Step(3e-4); !st.ok()) throw psync::TensorError(std::string(st.message()));
  }
  loss = Variable();  // freed before the capture: the graph frees only what it allocated
  psync::ops::Synchronize(c.device);
  psync::cuda_graph::StepGraph graph(c.device.index, step);
  const double cpu0 = psync::bench::CpuMs();
  for (int i = 0; i < c.steps; ++i) {
    const auto t0 = Clock::now();
    graph.Replay();
    if (absl::Status st = opt->Step(3e-4); !st.ok()) throw psync::TensorError(std::string(st.message()));
    psync::ops::Synchronize(c.device);
    const double ms = Ms(Clock::now() - t0);
    r->step_ms.push_back(ms);
    r->fwd_ms.push_back(0);
    r->bwd_ms.push_back(0);
    r->opt_ms.push_back(0);
  }
  r->cpu_ms = (psync::bench::CpuMs() - cpu0) / c.steps;
  r->loss = loss.data().Item();
  return true;
}

// Keeps, per mode, the round with the lowest median.
void KeepBest(std::vector<ModeResult>& results, ModeResult r) {
  auto it = std::find_if(results.begin(), results.end(), [&](const ModeResult& o) { return o.key() == r.key(); });
  if (it == results.end()) {
    results.push_back(std::move(r));
  } else if (Median(r.step_ms) < Median(it->step_ms)) {
    *it = std::move(r);
  }
}

void Print(const Config& c, const std::vector<ModeResult>& results, int64_t per_rank_batch) {
  const psync::nn::GPT probe(c.gpt);
  std::printf("%s: %s, %s, %s attention, %s loss, global batch %d (%lld per rank), T=%lld, %s, %d BLAS thread(s)%s, "
              "AdamW, %d steps (+%d warmup) x %d round(s)\n",
              kName, probe.Describe().c_str(), psync::nn::PrecisionName(c.precision),
              psync::nn::GptAttentionName(c.gpt.attention), c.fused_classifier ? "fused-classifier" : "cross-entropy",
              c.batch, static_cast<long long>(per_rank_batch),
              static_cast<long long>(c.gpt.block_size),
              c.mode == "ddp" ? absl::StrCat("world ", c.world).c_str() : "one process", c.threads,
              c.mode == "ddp" ? "/rank" : "", c.steps, c.warmup, c.rounds);
  double compute = -1;
  for (const auto& r : results) {
    if (r.mode == "compute") compute = Median(r.step_ms);
  }
  std::printf("  %-12s %10s %9s %9s %9s %11s %11s %8s %9s\n", "mode", "median ms", "fwd ms", "bwd ms", "opt ms",
              "exposed ms", "cpu ms/step", "loss", "peak MiB");
  // Work per step: 6 N per token (N: every parameter, the head's included)
  // plus attention 12 L T^2 C per sequence (issue 21's 7.006 TFLOP for
  // GPT-2 small at 8 x 1024).
  const double tokens = static_cast<double>(per_rank_batch) * static_cast<double>(c.gpt.block_size);
  double nparams = 0;
  for (const auto& [name, p] : probe.named_parameters()) nparams += static_cast<double>(p.data().numel());
  const double flops = 6 * nparams * tokens + 12.0 * static_cast<double>(c.gpt.n_layer) * tokens *
                                                  static_cast<double>(c.gpt.block_size) * static_cast<double>(c.gpt.n_embd);
  for (const auto& r : results) {
    const double med = Median(r.step_ms);
    char exposed[32] = "-";
    if (r.mode != "compute" && r.mode != "single" && compute >= 0) {
      std::snprintf(exposed, sizeof(exposed), "%.2f", med - compute);
    }
    std::printf("  %-12s %10.2f %9.2f %9.2f %9.2f %11s %11.2f %8.4f %9.1f\n", r.key().c_str(), med, Median(r.fwd_ms),
                Median(r.bwd_ms), Median(r.opt_ms), exposed, r.cpu_ms, r.loss, r.peak_mib);
  }
  for (const auto& r : results) {
    const double med = Median(r.step_ms);
    const std::string gpu =
        c.device.is_cuda()
            ? absl::StrFormat(" tokens_per_s=%.0f mfu=%.4f", tokens / (med / 1e3),
                              flops / (med / 1e3) / (c.peak_tflops * 1e12))
            : "";
    std::printf("RESULT impl=psync mode=%s%s precision=%s threads=%d world=%d per_rank_batch=%lld median_ms=%.3f "
                "min_ms=%.3f fwd_ms=%.3f bwd_ms=%.3f opt_ms=%.3f exposed_ms=%.3f cpu_ms=%.3f peak_mib=%.1f "
                "attention=%s%s\n",
                r.mode.c_str(), r.backend.empty() ? "" : (" backend=" + r.backend).c_str(),
                psync::nn::PrecisionName(c.precision), c.threads, c.mode == "ddp" ? c.world : 1,
                static_cast<long long>(per_rank_batch), med, *std::min_element(r.step_ms.begin(), r.step_ms.end()),
                Median(r.fwd_ms), Median(r.bwd_ms), Median(r.opt_ms),
                r.mode != "compute" && r.mode != "single" && compute >= 0 ? med - compute : 0.0, r.cpu_ms, r.peak_mib,
                psync::nn::GptAttentionName(c.gpt.attention), gpu.c_str());
  }
  std::fflush(stdout);
}

// --profile: wall time per backward node kind (node name up to "("), summed over
// every backward of the run, from the engine's node observer (called on the
// training thread only: the bench runs backward on one thread).
class BackwardProfile {
 public:
  BackwardProfile() {
    psync::autograd::Engine::Get().SetNodeObserver([this](const psync::autograd::Node& node, bool begin) {
      if (begin) {
        start_ = Clock::now();
        return;
      }
      std::string name = node.name();  // AccumulateGrad(<param>) -> AccumulateGrad: one row per kind
      name = name.substr(0, name.find('('));
      Entry& e = by_name_[name];
      e.ms += Ms(Clock::now() - start_);
      ++e.calls;
    });
  }
  ~BackwardProfile() { psync::autograd::Engine::Get().SetNodeObserver(nullptr); }
  void Print(int backwards) const {
    std::vector<std::pair<std::string, Entry>> rows(by_name_.begin(), by_name_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double total = 0;
    for (const auto& r : rows) total += r.second.ms;
    std::printf("  backward nodes, ms per backward (%d backwards, warmup included):\n", backwards);
    for (const auto& [name, e] : rows) {
      std::printf("    %-28s %8.3f ms %6.1f%% %6lld calls/backward\n", name.c_str(), e.ms / backwards,
                  100 * e.ms / total, static_cast<long long>(e.calls / backwards));
    }
  }

 private:
  struct Entry {
    double ms = 0;
    int64_t calls = 0;
  };
  Clock::time_point start_;
  std::map<std::string, Entry> by_name_;
};

int RunSingle(const Config& c) {
  openblas_set_num_threads(c.threads);
  // cuda:N current for this thread, so no op's device guard touches cuda:0.
  if (c.device.is_cuda()) psync::cuda_device::SetCurrentDevice(c.device.index);
  std::unique_ptr<BackwardProfile> profile;
  if (absl::GetFlag(FLAGS_profile)) profile = std::make_unique<BackwardProfile>();
  std::vector<ModeResult> results;
  try {
    for (int round = 0; round < c.rounds; ++round) {
      psync::nn::GPT model(c.gpt, c.device, /*seed=*/7);
      ModeResult r;
      r.mode = c.cuda_graph ? "graph" : "single";
      if (c.device.is_cuda()) psync::cuda_device::ResetPeakBytes(c.device.index);
      if (c.cuda_graph) {
        if (!TimeStepsGraph(c, model, &r)) return 1;
      } else if (!TimeSteps(c, 0, model, c.device, nullptr, c.batch, &r)) {
        return 1;
      }
      if (c.device.is_cuda()) r.peak_mib = static_cast<double>(psync::cuda_device::PeakBytes(c.device.index)) / (1 << 20);
      KeepBest(results, std::move(r));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kName, e.what());
    return 1;
  }
  Print(c, results, c.batch);
  if (profile) profile->Print(c.rounds * (c.warmup + c.steps));
  return 0;
}

int RunRank(const Config& c, int rank, const std::string& dir) {
  openblas_set_num_threads(c.threads);
  const int64_t b = c.batch / c.world;
  auto store = std::make_shared<psync::comm::FileStore>(dir);
  std::vector<std::shared_ptr<psync::comm::ProcessGroup>> groups;  // one per backend, made in order on every rank
  for (const std::string& backend : c.backends) {
    psync::comm::GroupOptions go;
    go.timeout = std::chrono::seconds(60);
    go.prefix = "gpt-bench-" + backend;
    go.job_tag = "gpt-bench";
    auto pg = psync::comm::CreateProcessGroup(backend, store, rank, c.world, go);
    if (!pg.ok()) {
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, backend.c_str(), pg.status().ToString().c_str());
      return 1;
    }
    groups.emplace_back(std::move(*pg));
  }
  std::vector<ModeResult> results;
  try {
    for (int round = 0; round < c.rounds; ++round) {
      // compute: the per-rank step with no communication (the floor).
      if (!groups.front()->Barrier(std::chrono::seconds(60)).ok()) return 1;
      {
        psync::nn::GPT model(c.gpt, psync::Device::CPU(), /*seed=*/7);
        ModeResult r;
        r.mode = "compute";
        if (!TimeSteps(c, rank, model, psync::Device::CPU(), nullptr, b, &r)) return 1;
        KeepBest(results, std::move(r));
      }
      std::vector<int> stages = {0};
      stages.insert(stages.end(), c.zero_stages.begin(), c.zero_stages.end());
      for (size_t g = 0; g < groups.size(); ++g) {
        // Alternating: ddp then each ZeRO stage, on the same group.
        for (int zero : stages) {
          if (!groups.front()->Barrier(std::chrono::seconds(60)).ok()) return 1;
          auto model = std::make_shared<psync::nn::GPT>(c.gpt, psync::Device::CPU(), /*seed=*/7);
          psync::ddp::DdpOptions opts;
          opts.bucket_caps = c.bucket_caps;
          opts.zero_stage = zero;
          opts.zero3_prefetch = absl::GetFlag(FLAGS_zero3_prefetch);
          auto ddp = psync::ddp::DistributedDataParallel::Create(model, groups[g], opts);
          if (!ddp.ok()) {
            std::fprintf(stderr, "rank %d: ddp: %s\n", rank, ddp.status().ToString().c_str());
            return 1;
          }
          ModeResult r;
          r.mode = zero == 0 ? "ddp" : absl::StrCat("zero", zero);
          r.backend = c.backends[g];
          if (!TimeSteps(c, rank, *model, psync::Device::CPU(), ddp->get(), b, &r)) return 1;
          KeepBest(results, std::move(r));
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
  if (rank == 0) Print(c, results, b);
  return 0;
}

int PositiveFlag(const char* flag, int v) {
  if (v <= 0) psync::ExitBadFlag(kName, absl::StrCat("--", flag, "=", v, ": must be positive"));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  psync::ops::ReexecForBetterOpenBlasCore(argv);  // the kernels psync-worker runs with
  const psync::ParsedArgs args = psync::ParseFlagsOrExit(
      kName, "psync-gpt-step-bench [flags]  (GPT forward + cross-entropy + backward + AdamW step time)", argc, argv,
      psync::FlagsDefinedIn(__FILE__));
  if (!args.positional.empty()) psync::ExitBadFlag(kName, "unexpected argument '" + args.positional.front() + "'");
  Config c;
  c.gpt.vocab_size = PositiveFlag("vocab-size", absl::GetFlag(FLAGS_vocab_size));
  c.gpt.block_size = PositiveFlag("block-size", absl::GetFlag(FLAGS_block_size));
  c.gpt.n_layer = PositiveFlag("n-layer", absl::GetFlag(FLAGS_n_layer));
  c.gpt.n_head = PositiveFlag("n-head", absl::GetFlag(FLAGS_n_head));
  c.gpt.n_embd = PositiveFlag("n-embd", absl::GetFlag(FLAGS_n_embd));
  if (absl::Status st = psync::nn::ValidateGptConfig(c.gpt); !st.ok()) {
    psync::ExitBadFlag(kName, std::string(st.message()));
  }
  auto attention = psync::nn::ParseGptAttention(absl::GetFlag(FLAGS_attention));
  if (!attention.ok()) psync::ExitBadFlag(kName, std::string(attention.status().message()));
  c.gpt.attention = *attention;
  c.fused_classifier = absl::GetFlag(FLAGS_fused_classifier);
  c.batch = PositiveFlag("batch", absl::GetFlag(FLAGS_batch));
  c.mode = absl::GetFlag(FLAGS_mode);
  auto device = psync::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) psync::ExitBadFlag(kName, absl::StrCat("--device: ", device.status().message()));
  if (absl::Status st = psync::CheckDeviceAvailable(*device); !st.ok()) {
    psync::ExitBadFlag(kName, absl::StrCat("--device: ", st.message()));
  }
  if (device->is_cuda() && c.mode != "single") psync::ExitBadFlag(kName, "--device=cuda: only with --mode=single");
  c.device = *device;
  auto precision = psync::nn::ParsePrecision(absl::GetFlag(FLAGS_precision));
  if (!precision.ok()) psync::ExitBadFlag(kName, std::string(precision.status().message()));
  c.precision = *precision;
  c.threads = PositiveFlag("threads", absl::GetFlag(FLAGS_threads));
  c.world = PositiveFlag("world", absl::GetFlag(FLAGS_world));
  absl::StatusOr<psync::BucketCaps> caps = psync::BucketCaps::FromMiB(
      absl::GetFlag(FLAGS_bucket_cap_mb), static_cast<double>(psync::kDefaultFirstBucketCapBytes) / (1 << 20));
  if (!caps.ok()) psync::ExitBadFlag(kName, std::string(caps.status().message()));
  c.bucket_caps = *caps;
  c.steps = PositiveFlag("steps", absl::GetFlag(FLAGS_steps));
  c.warmup = PositiveFlag("warmup", absl::GetFlag(FLAGS_warmup));
  c.rounds = PositiveFlag("rounds", absl::GetFlag(FLAGS_rounds));
  c.cuda_graph = absl::GetFlag(FLAGS_cuda_graph);
  c.peak_tflops = absl::GetFlag(FLAGS_peak_tflops);
  if (c.cuda_graph && (!c.device.is_cuda() || c.mode != "single")) {
    psync::ExitBadFlag(kName, "--cuda-graph: only with --device=cuda --mode=single");
  }
  for (absl::string_view b : absl::StrSplit(absl::GetFlag(FLAGS_backends), ',')) {
    if (b != "gloo" && b != "shm") {
      psync::ExitBadFlag(kName, absl::StrCat("--backends: unknown backend \"", b, "\" (gloo, shm)"));
    }
    c.backends.emplace_back(b);
  }
  for (absl::string_view z : absl::StrSplit(absl::GetFlag(FLAGS_zero), ',', absl::SkipEmpty())) {
    if (z != "1" && z != "2" && z != "3") {
      psync::ExitBadFlag(kName, absl::StrCat("--zero: \"", z, "\" is not 1, 2 or 3"));
    }
    c.zero_stages.push_back(z[0] - '0');
  }
  if (c.mode == "single") return RunSingle(c);
  if (c.mode != "ddp") psync::ExitBadFlag(kName, "--mode=" + c.mode + ": expected single or ddp");
  if (c.batch % c.world != 0) {
    psync::ExitBadFlag(kName, absl::StrCat("--batch=", c.batch, " must be divisible by --world=", c.world,
                                           " (each rank takes batch/world sequences)"));
  }
  const int failed = psync::bench::ForkRanks(kName, c.world, std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s)),
                                             [&](int rank, const std::string& dir) { return RunRank(c, rank, dir); });
  return failed == 0 ? 0 : 1;
}
