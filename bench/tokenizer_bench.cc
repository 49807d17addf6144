// psync-tokenizer-bench: how fast worker/tokenizer encodes a file (the issue's
// bar: the fortunes corpus at >= 5 MB/s per core) and trains.
//
//   psync-tokenizer-bench --input=FILE (--tokenizer=DIR | --vocab-size=N) [--rounds=5]
//
// Each round loads the tokenizer afresh (an empty piece cache, as
// psync-tokenize encode starts) and encodes the whole file in one call;
// printed: wall and thread-CPU seconds and MB/s per round, then the median
// and best of the CPU rate (on a shared machine CPU time is the fair
// measure: wall time counts the other processes). With --vocab-size it first
// trains a tokenizer on the file (timed) and encodes with that.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/bench_util.h"
#include "common/flags.h"
#include "worker/tokenizer/bpe_trainer.h"
#include "worker/tokenizer/gpt2_files.h"

ABSL_FLAG(std::string, input, "", "the text to encode (e.g. the main job's fortunes.txt)");
ABSL_FLAG(std::string, tokenizer, "", "a directory with vocab.json + merges.txt");
ABSL_FLAG(int64_t, vocab_size, 0, "train a tokenizer of this size on --input first (instead of --tokenizer)");
ABSL_FLAG(int, rounds, 5, "encoding rounds");

namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace psync;
  ParseFlagsOrExit("psync-tokenizer-bench",
                   "psync-tokenizer-bench --input=FILE (--tokenizer=DIR | --vocab-size=N) [--rounds=5]", argc, argv,
                   FlagsDefinedIn(__FILE__));
  const std::string input = absl::GetFlag(FLAGS_input);
  std::FILE* f = std::fopen(input.c_str(), "rb");
  if (f == nullptr) {
    std::fprintf(stderr, "psync-tokenizer-bench: --input=%s cannot be read\n", input.c_str());
    return 2;
  }
  std::string text;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  const double mb = static_cast<double>(text.size()) / 1e6;

  std::string dir = absl::GetFlag(FLAGS_tokenizer);
  if (absl::GetFlag(FLAGS_vocab_size) > 0) {
    const auto start = bench::Clock::now();
    const double cpu = ThreadCpuSeconds();
    tokenizer::BpeTrainer trainer;
    trainer.AddText(text);
    tokenizer::TrainOptions o;
    o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
    absl::StatusOr<tokenizer::BpeTokenizer> t = trainer.Train(o);
    if (!t.ok()) {
      std::fprintf(stderr, "psync-tokenizer-bench: %s\n", std::string(t.status().message()).c_str());
      return 1;
    }
    std::printf("train: %lld tokens on %.2f MB in %.3f s wall, %.3f s CPU\n", static_cast<long long>(t->vocab_size()),
                mb, bench::Ms(bench::Clock::now() - start) / 1e3, ThreadCpuSeconds() - cpu);
    dir = (std::filesystem::temp_directory_path() / "psync-tokenizer-bench").string();
    if (!tokenizer::SaveTokenizer(*t, dir).ok()) return 1;
  }
  std::vector<double> cpu_rates;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    absl::StatusOr<tokenizer::BpeTokenizer> t = tokenizer::LoadTokenizer(dir);
    if (!t.ok()) {
      std::fprintf(stderr, "psync-tokenizer-bench: %s\n", std::string(t.status().message()).c_str());
      return 1;
    }
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    const auto start = bench::Clock::now();
    const double cpu = ThreadCpuSeconds();
    t->Encode(text, &ids);
    const double cpu_s = ThreadCpuSeconds() - cpu, wall_s = bench::Ms(bench::Clock::now() - start) / 1e3;
    cpu_rates.push_back(mb / cpu_s);
    std::printf("round %d: %zu tokens (%.3f bytes/token), %.3f s wall (%.1f MB/s), %.3f s CPU (%.1f MB/s per core)\n",
                r, ids.size(), static_cast<double>(text.size()) / static_cast<double>(ids.size()), wall_s, mb / wall_s,
                cpu_s, mb / cpu_s);
  }
  std::printf("RESULT impl=psync-bpe mb=%.3f median_mb_per_cpu_s=%.1f best_mb_per_cpu_s=%.1f\n", mb,
              bench::Median(cpu_rates), *std::max_element(cpu_rates.begin(), cpu_rates.end()));
  return 0;
}
