// psync-data-bench: how long the data formats take to open and to make
// batches (worker/data). Not a test: nothing is asserted.
//
//   psync-data-bench [--fashion-mnist=fashion-mnist] [--rounds=3] [--batch=256] [--tokens-file=F] [--block-size=256]
//
// Prints per round: Fashion-MNIST Open (gzip decode of train + t10k,
// validation), then per-batch time of image batches (uint8 -> normalised
// float32) and token batches (uint16 mmap -> int64) through Dataset::Get,
// and "RESULT impl=psync what=... median_ms=..." lines.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "worker/data/registry.h"

ABSL_FLAG(std::string, fashion_mnist, "fashion-mnist", "--data value of the IDX set to open");
ABSL_FLAG(int, rounds, 3, "rounds of each measurement (the median is reported)");
ABSL_FLAG(int, batch, 256, "examples per batch");
ABSL_FLAG(int, batches, 200, "batches timed per round");
ABSL_FLAG(std::string, tokens_file, "", "an llm.c .bin or any file (bytes) for the token batches; empty: skip");
ABSL_FLAG(int, block_size, 256, "T for the token batches");

namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// CPU time of this thread: the work itself, whatever else the machine runs.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over rounds of the mean ms per Get of `batches` consecutive steps.
double TimeBatches(const psync::data::Dataset& d, int batch, int batches, int rounds) {
  std::vector<double> per_round;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (int s = 0; s < batches; ++s) {
      psync::data::BatchSpec spec;
      spec.step = static_cast<int64_t>(r) * batches + s;
      spec.global_batch = batch;
      auto b = d.Get(spec);
      if (!b.ok()) {
        std::fprintf(stderr, "psync-data-bench: %s\n", std::string(b.status().message()).c_str());
        std::exit(1);
      }
    }
    per_round.push_back(Ms(t0, Clock::now()) / batches);
  }
  return Median(per_round);
}

}  // namespace

int main(int argc, char** argv) {
  psync::ParseFlagsOrExit("psync-data-bench", "psync-data-bench [flags]  (open and batch times of worker/data formats)",
                          argc, argv, psync::FlagsDefinedIn(__FILE__));
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const int batch = absl::GetFlag(FLAGS_batch);
  const int batches = absl::GetFlag(FLAGS_batches);

  psync::data::DataOptions o;
  o.path = absl::GetFlag(FLAGS_fashion_mnist);
  std::vector<double> open_ms, open_cpu_ms;
  psync::data::OpenedData images;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    const double c0 = ThreadCpuMs();
    auto d = psync::data::Open(o);
    open_ms.push_back(Ms(t0, Clock::now()));
    open_cpu_ms.push_back(ThreadCpuMs() - c0);
    if (!d.ok()) {
      std::fprintf(stderr, "psync-data-bench: %s\n", std::string(d.status().message()).c_str());
      return 1;
    }
    std::printf("round %d: open %s + held-out: %.1f ms wall, %.1f ms cpu\n", r, d->train->Describe().c_str(),
                open_ms.back(), open_cpu_ms.back());
    images = std::move(*d);
  }
  std::printf("RESULT impl=psync what=open_fashion_mnist median_ms=%.1f cpu_ms=%.1f\n", Median(open_ms),
              Median(open_cpu_ms));
  const double img_ms = TimeBatches(*images.train, batch, batches, rounds);
  std::printf("RESULT impl=psync what=image_batch_%d median_ms=%.4f\n", batch, img_ms);

  if (!absl::GetFlag(FLAGS_tokens_file).empty()) {
    psync::data::DataOptions t;
    t.path = absl::GetFlag(FLAGS_tokens_file);
    t.block_size = absl::GetFlag(FLAGS_block_size);
    auto tokens = psync::data::Open(t);
    if (!tokens.ok()) {
      t.format = "bytes";
      tokens = psync::data::Open(t);
    }
    if (!tokens.ok()) {
      std::fprintf(stderr, "psync-data-bench: %s\n", std::string(tokens.status().message()).c_str());
      return 1;
    }
    std::printf("tokens: %s\n", tokens->train->Describe().c_str());
    const double tok_ms = TimeBatches(*tokens->train, batch, batches, rounds);
    std::printf("RESULT impl=psync what=token_batch_%dx%d median_ms=%.4f\n", batch, absl::GetFlag(FLAGS_block_size),
                tok_ms);
  }
  return 0;
}
