// psync-step-bench: single-process training step time of an MLP
// (forward + MSE loss + backward + SGD), to compare with bench/torch_step.py
// (same model shape, batch and thread count). See bench/run_step_bench.sh.
//
//   psync-step-bench --widths=1024,4096,4096,1024 --batch=256 --steps=20 --threads=2
//
// Prints one line per timed step on --verbose, then a summary and a
// machine-readable line "RESULT impl=psync median_ms=... mean_ms=... min_ms=...".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cblas.h>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "psync/autograd/engine.h"
#include "worker/nn/models/mlp.h"
#include "psync/nn/loss.h"
#include "psync/optim/sgd.h"
#include "psync/tensor/device.h"
#include "worker/tensor/cuda/cuda_device.h"  // SetCurrentDevice
#include "psync/tensor/ops.h"
#include "worker/tensor/cpu/blas_core.h"

ABSL_FLAG(std::string, widths, "1024,4096,4096,1024", "MLP layer widths, input first");
ABSL_FLAG(int, batch, 256, "batch size");
ABSL_FLAG(int, steps, 20, "timed steps");
ABSL_FLAG(int, warmup, 3, "untimed steps first (allocator pools, BLAS thread start-up)");
ABSL_FLAG(int, threads, 0, "OpenBLAS threads (0 = leave OpenBLAS's default / OPENBLAS_NUM_THREADS)");
ABSL_FLAG(std::string, device, "cpu", "cpu | cuda | cuda:N");
ABSL_FLAG(float, lr, 0.01f, "SGD learning rate");
ABSL_FLAG(bool, verbose, false, "print every timed step");

namespace {

// Flag errors follow docs/cli-contract.md: one line naming the flag, exit 2.
[[noreturn]] void BadFlag(const std::string& flag, const std::string& why) {
  std::fprintf(stderr, "psync-step-bench: --%s: %s\n", flag.c_str(), why.c_str());
  std::exit(2);
}

std::vector<int64_t> ParseWidths(const std::string& text) {
  std::vector<int64_t> w;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      BadFlag("widths", "\"" + text + "\" is not a comma-separated list of positive integers");
    }
    w.push_back(v);
  }
  if (w.size() < 2) BadFlag("widths", "needs at least two widths (input and output)");
  return w;
}

psync::Tensor RandomTensor(const psync::Shape& shape, std::mt19937& rng, psync::Device device) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(psync::NumelOf(shape)));
  for (float& x : v) x = dist(rng);
  return psync::Tensor::FromVector(v, shape, device);
}

}  // namespace

int main(int argc, char** argv) {
  psync::ops::ReexecForBetterOpenBlasCore(argv);  // the kernels psync-worker runs with
  // MLP forward+backward+SGD step time (compare with bench/torch_step.py)
  const psync::ParsedArgs args =
      psync::ParseFlagsOrExit("psync-step-bench", "psync-step-bench [flags]  (MLP forward+backward+SGD step time (compare with bench/torch_step.py))", argc, argv, psync::FlagsDefinedIn(__FILE__));
  if (!args.positional.empty()) psync::ExitBadFlag("psync-step-bench", "unexpected argument '" + args.positional.front() + "'");
  const std::vector<int64_t> widths = ParseWidths(absl::GetFlag(FLAGS_widths));
  const int batch = absl::GetFlag(FLAGS_batch);
  const int steps = absl::GetFlag(FLAGS_steps);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int threads = absl::GetFlag(FLAGS_threads);
  if (batch <= 0) BadFlag("batch", "must be positive");
  if (steps <= 0) BadFlag("steps", "must be positive");
  if (warmup < 0) BadFlag("warmup", "must be >= 0");
  if (threads < 0) BadFlag("threads", "must be >= 0");
  auto device = psync::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) BadFlag("device", std::string(device.status().message()));
  if (absl::Status st = psync::CheckDeviceAvailable(*device); !st.ok()) {
    BadFlag("device", std::string(st.message()));
  }
  if (threads > 0) openblas_set_num_threads(threads);

  try {
    // cuda:N current for this thread, so no op's device guard touches cuda:0.
    if (device->is_cuda()) psync::cuda_device::SetCurrentDevice(device->index);
    psync::nn::MLP model(widths, *device, /*seed=*/0);
    psync::optim::SGD opt(model.named_parameters(), {});
    const double lr = absl::GetFlag(FLAGS_lr);
    std::mt19937 rng(0);
    psync::Tensor x = RandomTensor({batch, widths.front()}, rng, *device);
    psync::Tensor y = RandomTensor({batch, widths.back()}, rng, *device);
    int64_t nparams = 0;
    for (const auto& p : model.parameters()) nparams += p.data().numel();

    std::vector<double> ms;
    float last_loss = 0;
    for (int i = 0; i < warmup + steps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      opt.ZeroGrad();
      psync::autograd::Variable out = model.Forward(psync::autograd::Variable(x));
      psync::autograd::Variable loss = psync::nn::MseLoss(out, y);
      absl::Status st = psync::autograd::Engine::Get().Backward({loss});
      if (st.ok()) st = opt.Step(lr);
      if (!st.ok()) {
        std::fprintf(stderr, "psync-step-bench: step %d failed: %s\n", i, std::string(st.message()).c_str());
        return 1;
      }
      // CUDA work is asynchronous: wait for it so the time is the step's.
      psync::ops::Synchronize(*device);
      auto t1 = std::chrono::steady_clock::now();
      if (i >= warmup) {
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        if (absl::GetFlag(FLAGS_verbose)) std::printf("step %d: %.3f ms\n", i - warmup, ms.back());
      }
      if (i + 1 == warmup + steps) last_loss = loss.data().Item();
    }

    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(n);
    std::printf("psync-step-bench: MLP %s (%lld params), batch %d, device %s, BLAS threads %d, %d steps (+%d warmup)\n",
                absl::StrJoin(widths, ",").c_str(), static_cast<long long>(nparams), batch,
                device->ToString().c_str(), openblas_get_num_threads(), steps, warmup);
    std::printf("  median %.3f ms/step, mean %.3f ms/step, min %.3f, max %.3f, final loss %.6g\n", median, mean,
                sorted.front(), sorted.back(), last_loss);
    std::printf("RESULT impl=psync median_ms=%.3f mean_ms=%.3f min_ms=%.3f\n", median, mean, sorted.front());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "psync-step-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
