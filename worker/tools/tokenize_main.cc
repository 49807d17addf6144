// psync-tokenize: byte-level BPE tokenizers for psync's GPT
// (docs/cli-contract.md "psync-tokenize"):
//
//   psync-tokenize train  --input=FILE[,FILE...] --vocab-size=N --out=DIR
//       trains a tokenizer (worker/tokenizer/bpe_trainer.h) and writes
//       DIR/vocab.json and DIR/merges.txt in GPT-2's format;
//   psync-tokenize encode --tokenizer=DIR --input=FILE[,FILE...] --out=PREFIX [--shard-tokens=N]
//       writes the text's tokens as llm.c shards PREFIX_000000.bin, ...
//       (uint16, version 1: --data=PREFIX_'*'.bin trains on them);
//   psync-tokenize decode --tokenizer=DIR --input=SHARD[,SHARD...]
//       writes the tokens' bytes to stdout.
//
// --tokenizer may also be a vocab.json (merges.txt beside it), e.g. GPT-2's.
// Each input file is encoded on its own (nothing joins the end of one file to
// the start of the next), in the order given.
#include <time.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "worker/data/mapped_file.h"
#include "worker/data/token_file.h"
#include "worker/tokenizer/bpe_trainer.h"
#include "worker/tokenizer/gpt2_files.h"
#include "worker/tokenizer/pretokenizer.h"

ABSL_FLAG(std::string, input, "", "the input files, comma-separated (text for train/encode, llm.c shards for decode)");
ABSL_FLAG(std::string, out, "", "train: the tokenizer's directory; encode: the shards' path prefix");
ABSL_FLAG(std::string, tokenizer, "", "encode/decode: a directory with vocab.json + merges.txt, or a vocab.json");
ABSL_FLAG(int64_t, vocab_size, 512, "train: tokens in the vocabulary (256 bytes + merges), at most 65536");
ABSL_FLAG(int64_t, min_frequency, 2, "train: the fewest occurrences of a pair that is still merged");
ABSL_FLAG(int64_t, shard_tokens, 100000000, "encode: tokens per shard (the last one holds the rest), at most 2^31-1");

namespace {

using namespace psync;
constexpr char kProgram[] = "psync-tokenize";

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
  std::exit(2);
}

template <typename T>
T OrFail(absl::StatusOr<T> v, const std::string& context = "") {
  if (!v.ok()) Fail(absl::StrCat(context, v.status().message()));
  return *std::move(v);
}

std::vector<std::string> Inputs() {
  std::vector<std::string> files = absl::StrSplit(absl::GetFlag(FLAGS_input), ',', absl::SkipEmpty());
  if (files.empty()) Fail("--input is required (one or more files, comma-separated)");
  return files;
}

absl::string_view Text(const data::MappedFile& f) {
  return {reinterpret_cast<const char*>(f.data()), static_cast<size_t>(f.size())};
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// This thread's CPU time: the speed of encoding on a shared machine, where
// wall time counts the other processes too.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int Train() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) Fail("train: --out=DIR is required");
  const auto start = std::chrono::steady_clock::now();
  tokenizer::BpeTrainer trainer;
  for (const std::string& path : Inputs()) {
    auto f = OrFail(data::MappedFile::Open(path), "--input ");
    trainer.AddText(Text(*f));
  }
  tokenizer::TrainOptions o;
  o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  o.min_frequency = absl::GetFlag(FLAGS_min_frequency);
  tokenizer::BpeTokenizer t = OrFail(trainer.Train(o));
  if (absl::Status st = tokenizer::SaveTokenizer(t, out); !st.ok()) Fail(absl::StrCat("--out ", st.message()));
  std::printf("%s: trained %lld tokens (%zu merges%s) on %lld bytes (%lld distinct pieces) in %.1f s: %s/%s, %s/%s\n",
              kProgram, static_cast<long long>(t.vocab_size()), t.merges().size(),
              t.vocab_size() < o.vocab_size ? absl::StrCat("; no pair occurs ", o.min_frequency, " times after that").c_str() : "",
              static_cast<long long>(trainer.total_bytes()), static_cast<long long>(trainer.distinct_pieces()),
              Seconds(start), out.c_str(), tokenizer::kVocabFile, out.c_str(), tokenizer::kMergesFile);
  return 0;
}

tokenizer::BpeTokenizer LoadTokenizerFlag() {
  const std::string path = absl::GetFlag(FLAGS_tokenizer);
  if (path.empty()) Fail("--tokenizer is required (a directory with vocab.json and merges.txt)");
  return OrFail(tokenizer::LoadTokenizer(path), "--tokenizer: ");
}

int Encode() {
  const std::string prefix = absl::GetFlag(FLAGS_out);
  if (prefix.empty()) Fail("encode: --out=PREFIX is required (shards are PREFIX_000000.bin, ...)");
  const int64_t shard_tokens = absl::GetFlag(FLAGS_shard_tokens);
  if (shard_tokens < 1 || shard_tokens > INT32_MAX) {
    Fail(absl::StrCat("--shard-tokens=", shard_tokens, ": expected 1 to ", INT32_MAX, " (an llm.c header's int32 count)"));
  }
  tokenizer::BpeTokenizer t = LoadTokenizerFlag();
  if (t.vocab_size() > tokenizer::kMaxVocabSize) {
    Fail(absl::StrCat("--tokenizer ", absl::GetFlag(FLAGS_tokenizer), ": ", t.vocab_size(),
                      " tokens, but llm.c shards hold uint16 ids: at most ", tokenizer::kMaxVocabSize, " tokens"));
  }
  std::vector<int32_t> pending;
  int shards = 0;
  int64_t total_tokens = 0, total_bytes = 0;
  double encode_seconds = 0, encode_cpu = 0;
  std::error_code ec;
  if (const auto parent = std::filesystem::path(prefix).parent_path(); !parent.empty()) {
    std::filesystem::create_directories(parent, ec);
    if (ec) Fail(absl::StrCat("--out ", prefix, ": cannot create ", parent.string(), ": ", ec.message()));
  }
  auto flush = [&](bool all) {
    size_t done = 0;
    while (pending.size() - done >= static_cast<size_t>(shard_tokens) || (all && done < pending.size())) {
      const int64_t n = std::min<int64_t>(shard_tokens, static_cast<int64_t>(pending.size() - done));
      const std::string path = absl::StrFormat("%s_%06d.bin", prefix, shards++);
      if (absl::Status st = data::WriteLlmcTokens(path, pending.data() + done, n); !st.ok()) Fail(std::string(st.message()));
      done += static_cast<size_t>(n);
    }
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(done));
  };
  for (const std::string& path : Inputs()) {
    auto f = OrFail(data::MappedFile::Open(path), "--input ");
    const absl::string_view text = Text(*f);
    // Chunks of about 4 MB cut where a piece surely starts (SafeCut): the
    // same tokens as one call, in bounded memory.
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = tokenizer::SafeCut(text, std::min(text.size(), pos + (size_t{4} << 20)));
      const size_t before = pending.size();
      const auto start = std::chrono::steady_clock::now();
      const double cpu = ThreadCpuSeconds();
      t.Encode(text.substr(pos, end - pos), &pending);
      encode_cpu += ThreadCpuSeconds() - cpu;
      encode_seconds += Seconds(start);
      total_tokens += static_cast<int64_t>(pending.size() - before);
      pos = end;
      flush(false);
    }
    total_bytes += static_cast<int64_t>(text.size());
  }
  flush(true);
  if (shards == 0) Fail("--input: the files are empty: no tokens to write");
  auto rate = [&](double s) { return s > 0 ? static_cast<double>(total_bytes) / 1e6 / s : 0.0; };
  std::printf("%s: %lld bytes -> %lld tokens (%.3f bytes/token) in %d shard%s %s_*.bin; encoding took %.3f s wall "
              "(%.1f MB/s), %.3f s CPU (%.1f MB/s per core)\n",
              kProgram, static_cast<long long>(total_bytes), static_cast<long long>(total_tokens),
              static_cast<double>(total_bytes) / static_cast<double>(std::max<int64_t>(total_tokens, 1)), shards,
              shards == 1 ? "" : "s", prefix.c_str(), encode_seconds, rate(encode_seconds), encode_cpu, rate(encode_cpu));
  return 0;
}

int Decode() {
  tokenizer::BpeTokenizer t = LoadTokenizerFlag();
  for (const std::string& path : Inputs()) {
    data::TokenFile f = OrFail(data::OpenLlmcTokens(path, "--input"));
    std::vector<int64_t> ids(static_cast<size_t>(f.count));
    for (int64_t i = 0; i < f.count; ++i) ids[static_cast<size_t>(i)] = f.at(i);
    const std::string text = OrFail(t.Decode(ids), absl::StrCat("--input ", path, ": "));
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const psync::ParsedArgs args = psync::ParseFlagsOrExit(
      kProgram,
      "psync-tokenize train --input=FILE --vocab-size=N --out=DIR | encode --tokenizer=DIR --input=FILE --out=PREFIX "
      "[--shard-tokens=N] | decode --tokenizer=DIR --input=SHARD",
      argc, argv, psync::FlagsDefinedIn(__FILE__));
  if (args.positional.size() != 1) Fail("expected one command: train, encode or decode (see --help)");
  const std::string& cmd = args.positional[0];
  if (cmd == "train") return Train();
  if (cmd == "encode") return Encode();
  if (cmd == "decode") return Decode();
  Fail(absl::StrCat("unknown command '", cmd, "' (train, encode or decode)"));
}
