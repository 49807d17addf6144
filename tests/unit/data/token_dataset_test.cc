// --data-format=tokens|bytes (data/token_file.h, data/token_dataset.h): the
// issue-8 sharding contract against Python's reading of the same files, for
// W = 1, 2, 4 and M = 1, 2; every corrupt-header case with its message;
// memory mapping; the held-out tail.
#include "worker/data/token_dataset.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/common/temp_dir.h"
#include "tests/unit/data/data_test_util.h"
#include "worker/data/registry.h"

namespace psync::data {
namespace {

using namespace testing;  // NOLINT
using test_support::TempDir;

// reference.py token-batches output: per (step, k): "s k o | inputs | targets".
struct Sequence {
  int64_t step, slot, start;
  std::vector<int64_t> inputs, targets;
};
std::vector<Sequence> ParseSequences(const std::string& text, bool with_header = true) {
  std::vector<Sequence> out;
  for (const std::string& line : Lines(text)) {
    std::vector<std::string> parts = absl::StrSplit(line, '|');
    std::vector<int64_t> head = Numbers<int64_t>(parts[0]);
    Sequence s{};
    if (with_header) {
      s.step = head[0];
      s.slot = head[1];
      s.start = head[2];
    } else {
      s.slot = head[0];
    }
    s.inputs = Numbers<int64_t>(parts[1]);
    s.targets = Numbers<int64_t>(parts[2]);
    out.push_back(std::move(s));
  }
  return out;
}

std::string Int32s(const std::vector<int32_t>& v) {
  std::string out(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = static_cast<uint32_t>(v[i]);
    for (int b = 0; b < 4; ++b) out[i * 4 + b] = static_cast<char>(u >> (8 * b));
  }
  return out;
}

// An llm.c header (magic, version, count, zeros) followed by `payload`.
std::string Llmc(int32_t magic, int32_t version, int32_t count, const std::string& payload) {
  std::vector<int32_t> h(256, 0);
  h[0] = magic;
  h[1] = version;
  h[2] = count;
  return Int32s(h) + payload;
}

class TokenFiles : public ::testing::Test {
 protected:
  absl::StatusOr<OpenedData> OpenTokens(const std::string& path, int64_t t, const std::string& format = "auto",
                                        double val_fraction = 0, int64_t vocab_size = 0) {
    DataOptions o;
    o.path = path;
    o.format = format;
    o.block_size = t;
    o.val_fraction = val_fraction;
    o.vocab_size = vocab_size;
    return Open(o);
  }
  // Whether `path` is memory-mapped in this process.
  static bool Mapped(const std::string& path) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      if (line.find(path) != std::string::npos) return true;
    }
    return false;
  }
  // Opening fails with InvalidArgument naming the flag, the file and every needle.
  void ExpectOpenError(const std::string& path, int64_t t, const std::string& format,
                       const std::vector<std::string>& needles) {
    std::vector<std::string> all = {"--data " + path};
    all.insert(all.end(), needles.begin(), needles.end());
    ExpectError(OpenTokens(path, t, format).status(), absl::StatusCode::kInvalidArgument, all);
  }
  // The contract for every W in {1, 2, 4} and M in {1, 2}: the ranks'
  // micro-batches laid end to end are Python's batch of the step.
  void CheckContract(const Dataset& d, const std::string& path, const std::string& kind, int64_t t, int64_t b,
                     int64_t steps) {
    std::vector<Sequence> want = ParseSequences(
        Reference({"token-batches", path, kind, std::to_string(t), std::to_string(b), std::to_string(steps)}));
    ASSERT_EQ(static_cast<int64_t>(want.size()), b * steps);
    const auto& tokens = static_cast<const TokenDataset&>(d);
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<int64_t> want_x, want_y;
      for (int64_t k = 0; k < b; ++k) {
        const Sequence& q = want[s * b + k];
        EXPECT_EQ(tokens.SequenceStart(s, b, k), q.start);
        want_x.insert(want_x.end(), q.inputs.begin(), q.inputs.end());
        want_y.insert(want_y.end(), q.targets.begin(), q.targets.end());
      }
      for (int world : {1, 2, 4}) {
        for (int64_t m : {1, 2}) {
          std::vector<int64_t> x, y;
          ConcatRanks(d, s, world, m, b, &x, &y);
          EXPECT_EQ(x, want_x) << "step " << s << " W=" << world << " M=" << m;
          EXPECT_EQ(y, want_y) << "step " << s << " W=" << world << " M=" << m;
        }
      }
    }
  }

  TempDir dir_{"psync_data_tokens"};
};

TEST_F(TokenFiles, LlmcFileFollowsTheContract) {
  const std::string path = dir_.File("train.bin");
  Reference({"llmc", path, "150", "7"});  // N = 150, T = 8: offsets wrap mod N - T = 142
  absl::StatusOr<OpenedData> d = OpenTokens(path, 8);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->format, "tokens");  // auto: llm.c magic
  const Dataset& ds = *d->train;
  EXPECT_EQ(ds.info().task, Task::kLanguageModel);
  EXPECT_EQ(ds.info().example_shape, (Shape{8}));
  absl::StatusOr<Batch> b = ds.Get(Spec(0, 0, 1, 0, 1, 8));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->inputs.shape(), (Shape{8, 8}));
  EXPECT_EQ(b->inputs.dtype(), kInt64);
  EXPECT_EQ(b->targets.dtype(), kInt64);
  CheckContract(ds, path, "llmc", 8, 8, 6);

  // The largest id, from the tokens themselves (llm.c files carry no vocabulary).
  std::vector<Sequence> windows = ParseSequences(Reference({"token-windows", path, "llmc", "1"}), false);
  int64_t max_id = 0;
  for (const Sequence& w : windows) max_id = std::max({max_id, w.inputs[0], w.targets[0]});
  EXPECT_EQ(ds.info().max_token_id, max_id);
  EXPECT_EQ(ds.info().num_outputs, max_id + 1);
  EXPECT_NE(ds.Describe().find("llm.c, 150 tokens, T=8, mmap"), std::string::npos) << ds.Describe();
}

TEST_F(TokenFiles, BytesFileFollowsTheContract) {
  const std::string path = dir_.File("text.txt");
  Reference({"bytes", path, "301", "3"});
  absl::StatusOr<OpenedData> d = OpenTokens(path, 16, "bytes");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train->info().num_outputs, 256);
  CheckContract(*d->train, path, "bytes", 16, 8, 5);
}

TEST_F(TokenFiles, ExamplesAreWindowsEveryTTokens) {
  const std::string path = dir_.File("w.bin");
  Reference({"llmc", path, "41", "2"});
  absl::StatusOr<OpenedData> d = OpenTokens(path, 5);
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<Sequence> want = ParseSequences(Reference({"token-windows", path, "llmc", "5"}), false);
  ASSERT_EQ(d->train->num_examples(), 8);  // (41 - 1) / 5
  ASSERT_EQ(want.size(), 8u);
  absl::StatusOr<Batch> b = d->train->Examples(2, 6);
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<int64_t> x = b->inputs.ToVector<int64_t>(), y = b->targets.ToVector<int64_t>();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(std::vector<int64_t>(x.begin() + i * 5, x.begin() + i * 5 + 5), want[2 + i].inputs);
    EXPECT_EQ(std::vector<int64_t>(y.begin() + i * 5, y.begin() + i * 5 + 5), want[2 + i].targets);
  }
  ExpectError(d->train->Examples(7, 2).status(), absl::StatusCode::kInvalidArgument, {"examples [7, 9)"});
}

// --val-fraction: the last floor(F*N) tokens are held out; training wraps within the rest.
TEST_F(TokenFiles, ValFractionHoldsOutTheTailOfTheStream) {
  const std::string path = dir_.File("split.bin");
  Reference({"llmc", path, "100", "5"});
  absl::StatusOr<OpenedData> d = OpenTokens(path, 4, "auto", 0.3);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_NE(d->val, nullptr);
  const auto& train = static_cast<const TokenDataset&>(*d->train);
  const auto& val = static_cast<const TokenDataset&>(*d->val);
  EXPECT_EQ(train.num_tokens(), 70);
  EXPECT_EQ(val.num_tokens(), 30);
  std::vector<Sequence> all =
      ParseSequences(Reference({"token-windows", path, "llmc", "1"}), false);  // tok[i], tok[i+1]
  auto tok = [&](int64_t i) { return i < 99 ? all[i].inputs[0] : all[98].targets[0]; };
  absl::StatusOr<Batch> v = val.Examples(0, 1);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->inputs.ToVector<int64_t>(), (std::vector<int64_t>{tok(70), tok(71), tok(72), tok(73)}));
  // Training: sequence k of step s starts at ((s*B + k) * 4) mod (70 - 4).
  absl::StatusOr<Batch> t = train.Get(Spec(2, 0, 1, 0, 1, 8));
  ASSERT_TRUE(t.ok());
  std::vector<int64_t> x = t->inputs.ToVector<int64_t>();
  for (int64_t k = 0; k < 8; ++k) {
    const int64_t o = ((2 * 8 + k) * 4) % 66;
    EXPECT_EQ(x[k * 4], tok(o)) << k;
  }
  EXPECT_NE(val.Describe().find("last 30 of 100 tokens"), std::string::npos) << val.Describe();

  ExpectError(OpenTokens(path, 40, "auto", 0.3).status(), absl::StatusCode::kInvalidArgument,
              {"the held-out part's token count is 30", "more than the block size T = 40"});
}

// Memory-mapped, not copied: the file is mapped while the dataset lives.
TEST_F(TokenFiles, TokensAreMemoryMapped) {
  const std::string path = dir_.File("mapped.bin");
  Reference({"llmc", path, "5000", "1"});
  {
    absl::StatusOr<OpenedData> d = OpenTokens(path, 64);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(Mapped(path));
  }
  EXPECT_FALSE(Mapped(path));
}

TEST_F(TokenFiles, CorruptHeadersNameFileFieldAndExpectedValue) {
  const std::string toks(20, '\x01');  // 10 uint16 tokens
  auto write = [&](const std::string& name, const std::string& bytes) {
    const std::string p = dir_.File(name);
    WriteBytes(p, bytes);
    return p;
  };
  std::string p = write("short.bin", Llmc(kLlmcMagic, 1, 10, "").substr(0, 100));
  ExpectOpenError(p, 4, "tokens", {"truncated header: the file is 100 bytes", "1024-byte llm.c header"});
  p = write("magic.bin", Llmc(20240521, 1, 10, toks));
  ExpectOpenError(p, 4, "tokens", {"magic (header int32 0) is 20240521, expected 20240520", "--data-format=bytes"});
  p = write("version.bin", Llmc(kLlmcMagic, 2, 10, toks));
  ExpectOpenError(p, 4, "tokens", {"version (header int32 1) is 2, expected 1"});
  p = write("zero.bin", Llmc(kLlmcMagic, 1, 0, ""));
  ExpectOpenError(p, 4, "tokens", {"token count (header int32 2) is 0, expected at least 1"});
  p = write("negative.bin", Llmc(kLlmcMagic, 1, -3, toks));
  ExpectOpenError(p, 4, "tokens", {"token count (header int32 2) is -3"});
  p = write("truncated.bin", Llmc(kLlmcMagic, 1, 11, toks));
  ExpectOpenError(p, 4, "tokens",
                  {"token count (header int32 2) is 11", "1024 + 2 x 11 = 1046 bytes, got 1044", "(truncated)"});
  p = write("trailing.bin", Llmc(kLlmcMagic, 1, 9, toks));
  ExpectOpenError(p, 4, "tokens", {"token count (header int32 2) is 9", "1042 bytes, got 1044", "(trailing bytes)"});
  p = write("odd.bin", Llmc(kLlmcMagic, 1, 10, toks + "x"));
  ExpectOpenError(p, 4, "tokens", {"1044 bytes, got 1045"});
  // N <= T: a sequence needs T + 1 tokens.
  p = write("tiny.bin", Llmc(kLlmcMagic, 1, 10, toks));
  ExpectOpenError(p, 10, "tokens", {"token count (header int32 2) is 10", "more than the block size T = 10"});
  ExpectOpenError(p, 12, "tokens", {"token count (header int32 2) is 10", "more than the block size T = 12"});
  ASSERT_TRUE(OpenTokens(p, 9, "tokens").ok());
  ExpectError(OpenTokens(p, 0, "tokens").status(), absl::StatusCode::kInvalidArgument, {"--block-size is 0"});
  // bytes
  p = write("empty.txt", "");
  ExpectOpenError(p, 4, "bytes", {"the file is empty, expected at least 1 byte"});
  p = write("four.txt", "abcd");
  ExpectOpenError(p, 4, "bytes", {"token count (file size) is 4", "more than the block size T = 4"});
  // not there
  ExpectError(OpenTokens(dir_.File("missing.bin"), 4, "tokens").status(), absl::StatusCode::kNotFound,
              {"--data " + dir_.File("missing.bin"), "no such file"});
}

// ---- sets of llm.c shards (--data=DIR or a glob): one stream in sorted order

class TokenShards : public TokenFiles {
 protected:
  // Shards of 40, 7 and 60 tokens in dir_/shards, written out of order; a
  // window of T + 1 = 9 tokens can span all three.
  void WriteShards() {
    shards_ = dir_.File("shards");
    std::filesystem::create_directories(shards_);
    Reference({"llmc", shards_ + "/d_train_000002.bin", "60", "3"});
    Reference({"llmc", shards_ + "/d_train_000000.bin", "40", "1"});
    Reference({"llmc", shards_ + "/d_train_000001.bin", "7", "2"});
    WriteBytes(shards_ + "/notes.txt", "not a shard");
  }
  absl::StatusOr<OpenedData> OpenShards(const std::string& path, int64_t t, int64_t vocab_size = 0,
                                        double val_fraction = 0) {
    return OpenTokens(path, t, "auto", val_fraction, vocab_size);
  }
  std::string shards_;
};

TEST_F(TokenShards, ADirectoryOrAGlobIsOneStreamInSortedOrder) {
  WriteShards();
  for (const std::string& path : {shards_, shards_ + "/d_train_*.bin"}) {
    absl::StatusOr<OpenedData> d = OpenShards(path, 8);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->format, "tokens");  // auto: the first shard's magic
    const auto& ds = static_cast<const TokenDataset&>(*d->train);
    EXPECT_EQ(ds.num_tokens(), 107);
    EXPECT_NE(ds.Describe().find("(llm.c, 3 shards, 107 tokens, T=8, mmap on first use)"), std::string::npos)
        << ds.Describe();
    // Python concatenates the sorted shards; 13 steps of 8 wrap around the 99 starts.
    CheckContract(ds, path, "shards", 8, 8, 13);
    std::vector<Sequence> all = ParseSequences(Reference({"token-windows", path, "shards", "1"}), false);
    int64_t max_id = 0;
    for (const Sequence& w : all) max_id = std::max({max_id, w.inputs[0], w.targets[0]});
    EXPECT_EQ(ds.info().max_token_id, max_id);
  }
}

TEST_F(TokenShards, ValFractionHoldsOutTheTailOfTheConcatenation) {
  WriteShards();
  // The vocabulary is given: the held-out tail holds ids above the head's
  // largest, which without --vocab-size are refused before training
  // (Open.HeldOutTokenIdsMustFitTheVocabulary).
  absl::StatusOr<OpenedData> d = OpenShards(shards_, 4, 65536, 0.5);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& val = static_cast<const TokenDataset&>(*d->val);
  EXPECT_EQ(val.num_tokens(), 53);  // floor(0.5 * 107); it starts in the middle shard
  std::vector<Sequence> all = ParseSequences(Reference({"token-windows", shards_, "shards", "1"}), false);
  absl::StatusOr<Batch> v = val.Examples(0, 1);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->inputs.ToVector<int64_t>(),
            (std::vector<int64_t>{all[54].inputs[0], all[55].inputs[0], all[56].inputs[0], all[57].inputs[0]}));
}

TEST_F(TokenShards, ShardsAreMappedOnlyWhenReadTouchesThem) {
  WriteShards();
  const std::string first = shards_ + "/d_train_000000.bin", last = shards_ + "/d_train_000002.bin";
  {
    // With --vocab-size nothing scans the shards at Open: none is mapped.
    absl::StatusOr<OpenedData> d = OpenShards(shards_, 8, 50257);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->train->info().max_token_id, -1);
    EXPECT_EQ(d->train->info().num_outputs, 50257);
    EXPECT_FALSE(Mapped(first));
    EXPECT_FALSE(Mapped(last));
    ASSERT_TRUE(d->train->Get(Spec(0, 0, 1, 0, 1, 2)).ok());  // tokens 0..16: the first two shards
    EXPECT_TRUE(Mapped(first));
    EXPECT_FALSE(Mapped(last));
  }
  EXPECT_FALSE(Mapped(first));
}

TEST_F(TokenShards, IdsOutsideTheVocabularyNameTheShardWhenRead) {
  WriteShards();
  // Ids are < 50257 (reference.py); a vocabulary of 100 cannot hold them.
  absl::StatusOr<OpenedData> d = OpenShards(shards_, 8, 100);
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectError(d->train->Get(Spec(0, 0, 1, 0, 1, 2)).status(), absl::StatusCode::kInvalidArgument,
              {"--data shard " + shards_ + "/d_train_000000.bin: token 0 is id",
               "outside the model's vocabulary of 100 (--vocab-size)"});
}

TEST_F(TokenShards, HeadersAreCheckedPerShardAndErrorsNameIt) {
  WriteShards();
  const std::string bad = shards_ + "/d_train_000001.bin";
  std::string bytes = ReadBytes(bad);
  WriteBytes(bad, bytes.substr(0, bytes.size() - 2));  // one token short
  ExpectError(OpenShards(shards_, 8).status(), absl::StatusCode::kInvalidArgument,
              {"--data shard " + bad + ": token count (header int32 2) is 7", "(truncated)"});
  WriteBytes(bad, Llmc(1234, 1, 7, bytes.substr(1024)));
  ExpectError(OpenShards(shards_ + "/*.bin", 8).status(), absl::StatusCode::kInvalidArgument,
              {"--data shard " + bad + ": magic (header int32 0) is 1234"});
  WriteBytes(bad, bytes);
  // A shard rewritten after Open: the read that maps it says so.
  absl::StatusOr<OpenedData> d = OpenShards(shards_, 8, 50257);
  ASSERT_TRUE(d.ok()) << d.status();
  WriteBytes(bad, Llmc(kLlmcMagic, 1, 6, bytes.substr(1024, 12)));
  ExpectError(d->train->Get(Spec(0, 0, 1, 0, 1, 8)).status(), absl::StatusCode::kFailedPrecondition,
              {"--data shard " + bad + ": holds 6 tokens now, but 7 when the data was opened"});
}

TEST_F(TokenShards, SetsThatCannotBeReadAreRefused) {
  WriteShards();
  ExpectError(OpenShards(dir_.File("none_*.bin"), 8).status(), absl::StatusCode::kNotFound,
              {"--data " + dir_.File("none_*.bin") + ": no shard files match the pattern"});
  Reference({"llmc", shards_ + "/d_val_000000.bin", "20", "4"});
  ExpectError(OpenShards(shards_, 8).status(), absl::StatusCode::kInvalidArgument,
              {"holds both training (*_train_*) and validation (*_val_*) shards", "--data='" + shards_ + "/*_train_*.bin'"});
  // The glob that picks one split works; so does --val-data with the other.
  DataOptions o;
  o.path = shards_ + "/*_train_*.bin";
  o.val_path = shards_ + "/*_val_*.bin";
  o.block_size = 8;
  absl::StatusOr<OpenedData> d = Open(o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(static_cast<const TokenDataset&>(*d->val).num_tokens(), 20);
  o.val_path.clear();
  o.format = "bytes";
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument, {"--data-format=bytes takes one file"});
}

// Positions are int64: two shards of 2^31 - 1 tokens (sparse files) are one
// stream of 2^32 - 2, read past 2^31 without scanning anything first.
TEST_F(TokenShards, TheTotalMayPassTwoToTheThirtyOne) {
  const std::string big = dir_.File("big");
  std::filesystem::create_directories(big);
  const int32_t n = INT32_MAX;
  for (const char* name : {"/a.bin", "/b.bin"}) {
    const std::string p = big + name;
    WriteBytes(p, Llmc(kLlmcMagic, 1, n, ""));
    std::filesystem::resize_file(p, 1024 + 2 * static_cast<uintmax_t>(n));  // sparse: zeros, no disk
  }
  absl::StatusOr<OpenedData> d = OpenShards(big, 4, 50257);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& ds = static_cast<const TokenDataset&>(*d->train);
  EXPECT_EQ(ds.num_tokens(), 2 * int64_t{n});
  const int64_t step = (int64_t{1} << 31) / 4 / 2 + 7;  // starts just past 2^31
  EXPECT_GT(ds.SequenceStart(step, 2, 0), int64_t{1} << 31);
  absl::StatusOr<Batch> b = ds.Get(Spec(step, 0, 1, 0, 1, 2));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->inputs.ToVector<int64_t>(), std::vector<int64_t>(8, 0));
}

}  // namespace
}  // namespace psync::data
