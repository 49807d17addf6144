// psync-overlap-bench: how much gradient communication the reducer hides
// behind backward. CPU, `--world` ranks forked from this process (default 2),
// over each process group of `--backends` (gloo: TCP on 127.0.0.1; shm:
// /dev/shm). Every rank runs, in the same order:
//
//   compute   the training step without any communication (the floor)
//   overlap   DistributedDataParallel: buckets reduced from backward hooks
//   serial    no overlap: backward, then ONE allreduce of all gradients
//             (flattened), divide, copy back; like DDP without hooks
//   noprio    DistributedDataParallel with the engine's priorities off
//             (Engine::SetPrioritiesEnabled(false)): AccumulateGrad runs
//             last on iterations > 1, so buckets only fill at the very end
//   nocheck   overlap without the reducer's step check (the small per-
//             iteration allreduce of every rank's iteration, reducer.h):
//             overlap minus nocheck is what the check costs
//
// The communicating modes run once per backend ("overlap" is Gloo,
// "overlap@shm" the shm group). Rank 0 prints per mode: median step time,
// exposed communication (median step minus compute-only median, same
// per-rank batch), that as a share of the compute-only backward and, for the reducer
// modes, the fraction of backward elapsed when the first bucket launched
// ((first launch - backward start) / (end-of-backward callback - backward
// start)), and the process's CPU time per step (all threads: on a host whose
// cores are all busy, what a step really costs; robust to other load).
// Machine-readable lines: "RESULT impl=psync mode=... median_ms=... cpu_ms=...".
//
//   psync-overlap-bench --widths=512,2048,2048,2048,512 --batch=64 --steps=20 --threads=1

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <cblas.h>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "psync/autograd/engine.h"
#include "worker/comm/file_store.h"
#include "worker/comm/process_group_factory.h"
#include "psync/ddp/ddp.h"
#include "psync/nn/init.h"
#include "worker/nn/models/mlp.h"
#include "psync/nn/loss.h"
#include "psync/optim/sgd.h"
#include "psync/tensor/ops.h"
#include "worker/tensor/cpu/blas_core.h"
#include "worker/ddp/reducer.h"

ABSL_FLAG(std::string, widths, "512,2048,2048,2048,512", "MLP layer widths, input first");
ABSL_FLAG(int, batch, 64, "batch size per rank");
ABSL_FLAG(int, steps, 20, "timed steps per mode");
ABSL_FLAG(int, warmup, 3, "untimed steps first (bucket rebuild, pools, BLAS start-up)");
ABSL_FLAG(int, threads, 1, "OpenBLAS threads per rank process");
ABSL_FLAG(int, world, 2, "ranks (processes forked on this machine)");
ABSL_FLAG(double, bucket_cap_mb, static_cast<double>(psync::kDefaultBucketCapBytes) / (1 << 20), "bucket cap (MiB)");
ABSL_FLAG(double, first_bucket_mb, static_cast<double>(psync::kDefaultFirstBucketCapBytes) / (1 << 20), "first bucket cap (MiB)");
ABSL_FLAG(std::string, modes, "compute,overlap,serial,noprio", "modes to run, in order");
ABSL_FLAG(int, rounds, 1, "repeat the mode list; each mode reports its best median (least disturbed by other load)");
ABSL_FLAG(int, timeout_s, 300, "whole-run deadline; ranks still running are killed");
ABSL_FLAG(std::string, backends, "gloo", "process groups to run the communicating modes on: gloo, shm (comma list)");

namespace {

using psync::Tensor;
using psync::autograd::Variable;
using psync::bench::Clock;
using psync::bench::CpuMs;
using psync::bench::Median;
using psync::bench::Ms;

[[noreturn]] void BadFlag(const std::string& flag, const std::string& why) {
  std::fprintf(stderr, "psync-overlap-bench: --%s: %s\n", flag.c_str(), why.c_str());
  std::exit(2);
}

struct Config {
  std::vector<int64_t> widths;
  int batch, steps, warmup, threads, world;
  double bucket_cap_mb, first_bucket_mb;  // as given, for the header line
  psync::BucketCaps bucket_caps;           // the same in bytes
  std::vector<std::string> modes;
  std::vector<std::string> backends;
  int rounds = 1;
};

struct ModeResult {
  std::string mode;
  std::vector<double> step_ms;
  std::vector<double> backward_ms;        // Backward() incl. the reducer's end-of-backward wait
  double cpu_ms = 0;                      // process CPU per timed step (all threads)
  std::vector<double> first_launch_frac;  // reducer modes only
  size_t buckets = 0;
};

std::shared_ptr<psync::nn::MLP> MakeModel(const Config& c) {
  return std::make_shared<psync::nn::MLP>(c.widths, psync::Device::CPU(), /*seed=*/7);
}

std::pair<Tensor, Tensor> Data(const Config& c, int rank) {
  psync::nn::SplitMix64 rng(100 + static_cast<uint64_t>(rank));
  auto x = psync::nn::UniformValues(rng, c.batch * c.widths.front(), -1, 1);
  auto y = psync::nn::UniformValues(rng, c.batch * c.widths.back(), -1, 1);
  return {Tensor::FromVector(x, {c.batch, c.widths.front()}), Tensor::FromVector(y, {c.batch, c.widths.back()})};
}

#define BENCH_CHECK_OK(expr)                                                                     \
  do {                                                                                           \
    absl::Status _st = (expr);                                                                   \
    if (!_st.ok()) {                                                                             \
      std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, #expr, _st.ToString().c_str());    \
      return false;                                                                              \
    }                                                                                            \
  } while (0)

// compute: no communication at all.
bool RunCompute(const Config& c, int rank, ModeResult* r) {
  auto model = MakeModel(c);
  psync::optim::SGD sgd(model->named_parameters(), {});
  auto [x, y] = Data(c, rank);
  double cpu0 = 0;
  for (int i = 0; i < c.warmup + c.steps; ++i) {
    if (i == c.warmup) cpu0 = CpuMs();
    const auto t0 = Clock::now();
    sgd.ZeroGrad();
    Variable loss = psync::nn::MseLoss(model->Forward(Variable(x)), y);
    const auto tb = Clock::now();
    BENCH_CHECK_OK(psync::autograd::Backward(loss));
    const auto te = Clock::now();
    BENCH_CHECK_OK(sgd.Step(0.01));
    if (i >= c.warmup) {
      r->step_ms.push_back(Ms(Clock::now() - t0));
      r->backward_ms.push_back(Ms(te - tb));
    }
  }
  r->cpu_ms = (CpuMs() - cpu0) / c.steps;
  return true;
}

// overlap / noprio / nocheck: the reducer.
bool RunDdp(const Config& c, int rank, std::shared_ptr<psync::comm::ProcessGroup> pg, bool priorities,
            bool check_in_step, ModeResult* r) {
  psync::autograd::ScopedPriorities prio(priorities);
  auto model = MakeModel(c);
  psync::ddp::DdpOptions opts;
  opts.bucket_caps = c.bucket_caps;
  opts.check_in_step = check_in_step;
  auto ddp = psync::ddp::DistributedDataParallel::Create(model, pg, opts);
  BENCH_CHECK_OK(ddp.status());
  psync::optim::SGD sgd(model->named_parameters(), {});
  auto [x, y] = Data(c, rank);
  double cpu0 = 0;
  for (int i = 0; i < c.warmup + c.steps; ++i) {
    if (i == c.warmup) cpu0 = CpuMs();
    const auto t0 = Clock::now();
    sgd.ZeroGrad();
    (*ddp)->reducer().DeclareIteration(i);
    auto out = (*ddp)->Forward(Variable(x));
    BENCH_CHECK_OK(out.status());
    Variable loss = psync::nn::MseLoss(*out, y);
    const auto tb = Clock::now();
    BENCH_CHECK_OK(psync::autograd::Backward(loss));
    const auto te = Clock::now();
    BENCH_CHECK_OK(sgd.Step(0.01));
    const auto t1 = Clock::now();
    if (i >= c.warmup) {
      r->step_ms.push_back(Ms(t1 - t0));
      r->backward_ms.push_back(Ms(te - tb));
      const auto& tr = (*ddp)->reducer().last_iteration_trace();
      r->first_launch_frac.push_back(Ms(tr.first_launch - tb) / Ms(tr.finalize_begin - tb));
    }
  }
  r->cpu_ms = (CpuMs() - cpu0) / c.steps;
  r->buckets = (*ddp)->reducer().num_buckets();
  return true;
}

// serial: backward, then one allreduce of everything.
bool RunSerial(const Config& c, int rank, psync::comm::ProcessGroup& pg, ModeResult* r) {
  auto model = MakeModel(c);
  const auto params = model->parameters();
  BENCH_CHECK_OK(psync::ddp::BroadcastParameters(params, pg, std::chrono::seconds(60)));
  psync::optim::SGD sgd(model->named_parameters(), {});
  auto [x, y] = Data(c, rank);
  int64_t total = 0;
  for (const auto& p : params) total += p.data().numel();
  Tensor flat = Tensor::Empty({total});
  double cpu0 = 0;
  for (int i = 0; i < c.warmup + c.steps; ++i) {
    if (i == c.warmup) cpu0 = CpuMs();
    const auto t0 = Clock::now();
    sgd.ZeroGrad();
    BENCH_CHECK_OK(psync::autograd::Backward(psync::nn::MseLoss(model->Forward(Variable(x)), y)));
    int64_t off = 0;
    for (const auto& p : params) {
      Tensor dst = flat.View(off, {p.data().numel()});
      psync::ops::Copy(dst, p.grad());
      off += p.data().numel();
    }
    BENCH_CHECK_OK(pg.AllreduceSum(flat, "all gradients")->Wait(std::chrono::seconds(60)));
    psync::ops::ScaleInPlace(flat, 1.0f / static_cast<float>(pg.size()));
    off = 0;
    for (const auto& p : params) {
      Tensor g = p.grad();
      psync::ops::Copy(g, flat.View(off, p.data().shape()));
      off += p.data().numel();
    }
    BENCH_CHECK_OK(sgd.Step(0.01));
    if (i >= c.warmup) r->step_ms.push_back(Ms(Clock::now() - t0));
  }
  r->cpu_ms = (CpuMs() - cpu0) / c.steps;
  return true;
}

int RunRank(const Config& c, int rank, const std::string& dir) {
  openblas_set_num_threads(c.threads);
  auto store = std::make_shared<psync::comm::FileStore>(dir);
  // One group per backend, made up front (every rank makes them in order).
  std::vector<std::shared_ptr<psync::comm::ProcessGroup>> groups;
  for (const std::string& b : c.backends) {
    psync::comm::GroupOptions go;
    go.timeout = std::chrono::seconds(60);
    go.prefix = "overlap-bench-" + b;
    go.job_tag = "overlap-bench";
    auto pg_or = psync::comm::CreateProcessGroup(b, store, rank, c.world, go);
    if (!pg_or.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, pg_or.status().ToString().c_str());
      return 1;
    }
    groups.emplace_back(std::move(*pg_or));
  }
  std::shared_ptr<psync::comm::ProcessGroup> sync = groups.front();  // barriers between modes
  std::vector<ModeResult> results;
  try {
    for (int round = 0; round < c.rounds; ++round) {
    for (const std::string& mode : c.modes) {
      for (size_t g = 0; g < groups.size(); ++g) {
        if (mode == "compute" && g > 0) continue;  // the floor needs no group
        const std::shared_ptr<psync::comm::ProcessGroup>& pg = groups[g];
        if (!sync->Barrier(std::chrono::seconds(60)).ok()) return 1;
        ModeResult r;
        r.mode = mode == "compute" || c.backends[g] == "gloo" ? mode : mode + "@" + c.backends[g];
        bool ok = false;
        if (mode == "compute") ok = RunCompute(c, rank, &r);
        else if (mode == "overlap") ok = RunDdp(c, rank, pg, /*priorities=*/true, /*check_in_step=*/true, &r);
        else if (mode == "noprio") ok = RunDdp(c, rank, pg, /*priorities=*/false, /*check_in_step=*/true, &r);
        else if (mode == "nocheck") ok = RunDdp(c, rank, pg, /*priorities=*/true, /*check_in_step=*/false, &r);
        else if (mode == "serial") ok = RunSerial(c, rank, *pg, &r);
        if (!ok) return 1;
        // Keep the round with the lowest median per mode.
        auto it = std::find_if(results.begin(), results.end(), [&](const ModeResult& o) { return o.mode == r.mode; });
        if (it == results.end()) {
          results.push_back(std::move(r));
        } else if (Median(r.step_ms) < Median(it->step_ms)) {
          *it = std::move(r);
        }
      }
    }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
  if (rank != 0) return 0;
  double compute = -1, compute_bwd = -1;
  for (const auto& r : results) {
    if (r.mode == "compute") {
      compute = Median(r.step_ms);
      compute_bwd = Median(r.backward_ms);
    }
  }
  int64_t nparams = 0;
  for (size_t i = 0; i + 1 < c.widths.size(); ++i) nparams += c.widths[i] * c.widths[i + 1] + c.widths[i + 1];
  std::printf("psync-overlap-bench: MLP %s (%lld params, %.1f MiB of gradients), batch %d per rank, world %d, "
              "%d BLAS thread(s)/rank, buckets %.3g MiB (first %.3g MiB), %d steps (+%d warmup) x %d round(s)\n",
              absl::StrJoin(c.widths, ",").c_str(), static_cast<long long>(nparams),
              static_cast<double>(nparams) * 4 / (1 << 20), c.batch, c.world, c.threads, c.bucket_cap_mb,
              c.first_bucket_mb, c.steps, c.warmup, c.rounds);
  std::printf("  %-12s %10s %10s %10s %12s %12s %14s %8s\n", "mode", "median ms", "bwd ms", "exposed ms",
              "exposed/bwd", "cpu ms/step", "1st launch at", "buckets");
  for (const auto& r : results) {
    const double med = Median(r.step_ms);
    const double exposed = compute >= 0 ? med - compute : 0;
    const std::string frac =
        r.first_launch_frac.empty() ? "-" : absl::StrCat(static_cast<int>(100 * Median(r.first_launch_frac)), "% bwd");
    const std::string share =
        compute_bwd > 0 && r.mode != "compute" ? absl::StrCat(static_cast<int>(100 * exposed / compute_bwd), "%") : "-";
    std::printf("  %-12s %10.2f %10.2f %10.2f %12s %12.2f %14s %8zu\n", r.mode.c_str(), med, Median(r.backward_ms),
                exposed, share.c_str(), r.cpu_ms, frac.c_str(), r.buckets);
  }
  for (const auto& r : results) {
    const double exposed = compute >= 0 ? Median(r.step_ms) - compute : 0.0;
    std::printf("RESULT impl=psync mode=%s median_ms=%.3f backward_ms=%.3f exposed_ms=%.3f exposed_bwd_share=%.3f "
                "cpu_ms=%.3f first_launch_frac=%.3f\n",
                r.mode.c_str(), Median(r.step_ms), Median(r.backward_ms), exposed,
                compute_bwd > 0 ? exposed / compute_bwd : -1.0, r.cpu_ms,
                r.first_launch_frac.empty() ? -1.0 : Median(r.first_launch_frac));
  }
  std::fflush(stdout);
  return 0;
}

std::vector<int64_t> ParseWidths(const std::string& text) {
  std::vector<int64_t> w;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) BadFlag("widths", "\"" + text + "\" is not a list of positive integers");
    w.push_back(v);
  }
  if (w.size() < 2) BadFlag("widths", "needs at least two widths");
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  psync::ops::ReexecForBetterOpenBlasCore(argv);  // the kernels psync-worker runs with
  // gradient communication overlap: psync reducer vs serial allreduce vs no priorities
  const psync::ParsedArgs args =
      psync::ParseFlagsOrExit("psync-overlap-bench", "psync-overlap-bench [flags]  (gradient communication overlap: psync reducer vs serial allreduce vs no priorities)", argc, argv, psync::FlagsDefinedIn(__FILE__));
  if (!args.positional.empty()) psync::ExitBadFlag("psync-overlap-bench", "unexpected argument '" + args.positional.front() + "'");
  Config c;
  c.widths = ParseWidths(absl::GetFlag(FLAGS_widths));
  c.batch = absl::GetFlag(FLAGS_batch);
  c.steps = absl::GetFlag(FLAGS_steps);
  c.warmup = absl::GetFlag(FLAGS_warmup);
  c.threads = absl::GetFlag(FLAGS_threads);
  c.world = absl::GetFlag(FLAGS_world);
  c.bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
  c.first_bucket_mb = absl::GetFlag(FLAGS_first_bucket_mb);
  absl::StatusOr<psync::BucketCaps> caps = psync::BucketCaps::FromMiB(c.bucket_cap_mb, c.first_bucket_mb);
  if (!caps.ok()) psync::ExitBadFlag("psync-overlap-bench", std::string(caps.status().message()));
  c.bucket_caps = *caps;
  c.rounds = absl::GetFlag(FLAGS_rounds);
  if (c.rounds < 1) BadFlag("rounds", "must be >= 1");
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_modes), ',')) {
    std::string mode(m);
    if (mode != "compute" && mode != "overlap" && mode != "serial" && mode != "noprio" && mode != "nocheck") {
      BadFlag("modes", "unknown mode \"" + mode + "\" (compute, overlap, serial, noprio, nocheck)");
    }
    c.modes.push_back(mode);
  }
  for (absl::string_view b : absl::StrSplit(absl::GetFlag(FLAGS_backends), ',')) {
    std::string backend(b);
    if (backend != "gloo" && backend != "shm") BadFlag("backends", "unknown backend \"" + backend + "\" (gloo, shm)");
    c.backends.push_back(backend);
  }
  if (c.batch <= 0) BadFlag("batch", "must be positive");
  if (c.steps <= 0) BadFlag("steps", "must be positive");
  if (c.warmup < 1) BadFlag("warmup", "must be >= 1 (the first iteration rebuilds buckets)");
  if (c.threads <= 0) BadFlag("threads", "must be positive");
  if (c.world < 1) BadFlag("world", "must be positive");

  const int failed =
      psync::bench::ForkRanks("psync-overlap-bench", c.world, std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s)),
                              [&](int rank, const std::string& dir) { return RunRank(c, rank, dir); });
  return failed == 0 ? 0 : 1;
}
