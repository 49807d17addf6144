// worker/tokenizer's file limits (file_limits.h): hostile or broken
// vocab.json / merges.txt files are refused at once, in bounded memory, with
// one short error naming the file, the line and (an excerpt of) the token;
// an empty or cut merges.txt is refused; added and special tokens still load.
// The hostile cases use only gpt2_files.h and literal sizes (64 MiB files,
// 4096-byte lines, 1,000,000 tokens or merges), so they also build against
// the code before the limits (where they ran for seconds to minutes, using
// gigabytes, or printed megabytes of error).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "tests/common/temp_dir.h"
#include "worker/tokenizer/gpt2_files.h"

namespace psync::tokenizer {
namespace {

using test_support::TempDir;

// The generous bounds a hostile file's refusal must meet (the real ones:
// well under a second, a few MB).
constexpr double kMaxSeconds = 5;
constexpr size_t kMaxMessageChars = 300;
constexpr long kMaxRssKb = 100 * 1024;

// The 256 byte tokens, then `extra` ("key": id from 256 on), as vocab.json.
std::string VocabJson(const std::vector<std::string>& extra = {}) {
  std::string v = "{";
  for (int b = 0; b < 256; ++b) {
    v += (b ? "," : "") + json::Quote(BytesToGpt2Text(std::string(1, static_cast<char>(b)))) + ":" + std::to_string(b);
  }
  for (size_t i = 0; i < extra.size(); ++i) v += "," + json::Quote(extra[i]) + ":" + std::to_string(256 + i);
  return v + "}";
}

void WriteAll(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// head, `count` copies of `c`, tail; in pieces, so the test's own memory stays small.
void WriteRun(const std::string& path, const std::string& head, char c, size_t count, const std::string& tail) {
  std::ofstream f(path, std::ios::binary);
  f << head;
  const std::string piece(size_t{1} << 20, c);
  for (size_t left = count; left > 0; left -= std::min(left, piece.size())) f.write(piece.data(), static_cast<std::streamsize>(std::min(left, piece.size())));
  f << tail;
}

// `text`, then zeros (a sparse file: no disk used) up to `size` bytes.
void WriteSparse(const std::string& path, const std::string& text, off_t size) {
  WriteAll(path, text);
  ASSERT_EQ(::truncate(path.c_str(), size), 0) << path;
}

long MaxRssKb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

struct Refusal {
  std::string message;
  double seconds = 0;
};

// Loads `dir`, which must be refused quickly, in bounded memory, with a
// short message. The memory is the growth of the process's peak RSS (ctest
// runs each test in a process of its own, so the peak before is small).
Refusal LoadRefused(const std::string& dir) {
  const long rss_before = MaxRssKb();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<BpeTokenizer> t = LoadTokenizer(dir);
  Refusal r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(t.ok());
  if (!t.ok()) r.message = std::string(t.status().message());
  EXPECT_LT(r.seconds, kMaxSeconds) << r.message.substr(0, 200);
  EXPECT_LT(r.message.size(), kMaxMessageChars) << r.message.substr(0, 400);
  EXPECT_EQ(r.message.find('\n'), std::string::npos) << "one line";
  EXPECT_LT(MaxRssKb() - rss_before, kMaxRssKb) << "growth of the peak RSS, KB";
  return r;
}

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Gpt2FilesLimits, AHugeLineOfNulsInMergesIsRefusedAtOnce) {
  TempDir dir("psync_toklim");
  WriteAll(dir.File("vocab.json"), VocabJson({BytesToGpt2Text("ab")}));
  // The file: a 64 MiB line of NULs (with the header, over 64 MiB).
  WriteSparse(dir.File("merges.txt"), "#version: 0.2\n", (off_t{64} << 20) + 15);
  Refusal r = LoadRefused(dir.path());
  EXPECT_TRUE(Has(r.message, dir.File("merges.txt") + ": 67108879 bytes, over the limit of 67108864")) << r.message;
  // Within the file's limit, the line's: refused after its first 4096 bytes,
  // quoting a few of them.
  WriteSparse(dir.File("merges.txt"), "#version: 0.2\na b\n", (off_t{64} << 20) - 1);
  r = LoadRefused(dir.path());
  EXPECT_TRUE(Has(r.message, dir.File("merges.txt") + " line 3: longer than 4096 bytes (the limit for a line): \"\\u0000"))
      << r.message;
}

TEST(Gpt2FilesLimits, AGibibyteSparseMergesIsRefusedBeforeReading) {
  TempDir dir("psync_toklim");
  WriteAll(dir.File("vocab.json"), VocabJson({BytesToGpt2Text("ab")}));
  WriteSparse(dir.File("merges.txt"), "#version: 0.2\na b\n", off_t{1} << 30);
  Refusal r = LoadRefused(dir.path());
  EXPECT_TRUE(Has(r.message, dir.File("merges.txt") + ": 1073741824 bytes, over the limit of 67108864")) << r.message;
}

TEST(Gpt2FilesLimits, AGibibyteSparseVocabIsRefusedBeforeReading) {
  TempDir dir("psync_toklim");
  WriteSparse(dir.File("vocab.json"), VocabJson(), off_t{1} << 30);
  WriteAll(dir.File("merges.txt"), "#version: 0.2\n");
  Refusal r = LoadRefused(dir.path());
  EXPECT_TRUE(Has(r.message, dir.File("vocab.json") + ": 1073741824 bytes, over the limit of 67108864")) << r.message;
  // Also when named by its vocab.json, and the merges.txt beside it is huge.
  WriteAll(dir.File("vocab.json"), VocabJson());
  WriteSparse(dir.File("merges.txt"), "#version: 0.2\n", off_t{1} << 30);
  r = LoadRefused(dir.File("vocab.json"));
  EXPECT_TRUE(Has(r.message, dir.File("merges.txt") + ": 1073741824 bytes")) << r.message;
}

TEST(Gpt2FilesLimits, LongStringsAndNumbersInVocabAreRefusedWithoutBufferingThem) {
  TempDir dir("psync_toklim");
  WriteAll(dir.File("merges.txt"), "");
  // A 60 MiB key (within the file's limit).
  WriteRun(dir.File("vocab.json"), "{\"", 'a', size_t{60} << 20, "\":0}");
  Refusal r = LoadRefused(dir.path());
  EXPECT_TRUE(Has(r.message, dir.File("vocab.json") + " line 1: a string longer than 6144 characters")) << r.message;
  WriteRun(dir.File("vocab.json"), "{\"a\":", '1', size_t{60} << 20, "}");
  r = LoadRefused(dir.path());
  EXPECT_TRUE(Has(r.message, "line 1: a number longer than 32 characters")) << r.message;
  // A NUL (which the JSON lexer would take for the end of input).
  WriteAll(dir.File("vocab.json"), std::string("{\"a\":0}\n\0junk", 13));
  EXPECT_EQ(LoadRefused(dir.path()).message, dir.File("vocab.json") + " line 2: a NUL byte (JSON text never holds one)");
  // A token of 1025 bytes, short enough as a string.
  WriteAll(dir.File("vocab.json"), "{\"" + std::string(1025, 'a') + "\":0}");
  EXPECT_TRUE(Has(LoadRefused(dir.path()).message, "line 1: token \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"... (1025 bytes) "
                                                    "is 1025 bytes, over the limit of 1024"));
  // Not a regular file (a directory here; a FIFO could block, a device never end).
  WriteAll(dir.File("vocab.json"), VocabJson());
  std::filesystem::remove(dir.File("merges.txt"));
  std::filesystem::create_directory(dir.File("merges.txt"));
  EXPECT_EQ(LoadRefused(dir.path()).message, dir.File("merges.txt") + ": not a regular file");
}

TEST(Gpt2FilesLimits, TooManyTokensOrMergesAreRefusedWhileParsing) {
  // 1,000,001 distinct tokens: refused at the one past the limit.
  std::string vocab = "{";
  for (int i = 0; i <= 1000000; ++i) vocab += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":" + std::to_string(i);
  vocab += "}";
  auto t = ParseGpt2Files(vocab, "", "v.json", "m.txt");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "v.json line 1: more than 1000000 tokens, the limit for a vocab.json");
  // An id past the limit, at once.
  t = ParseGpt2Files("{\"a\":1000000}", "", "v.json", "m.txt");
  EXPECT_TRUE(Has(std::string(t.status().message()), "v.json line 1: token \"a\" has id 1000000, expected an integer in [0, 1000000)"))
      << t.status();
  // 1,000,001 merges (repeats of one pair are allowed: the last one ranks).
  std::string merges = "#version: 0.2\n";
  for (int i = 0; i <= 1000000; ++i) merges += "a b\n";
  t = ParseGpt2Files(VocabJson({"ab"}), merges, "v.json", "m.txt");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "m.txt line 1000002: more than 1000000 merges, the limit for a merges.txt");
}

TEST(Gpt2FilesLimits, ContentOverTheFileLimitIsRefusedWhenNotFromAFile) {
  // Counted while reading (a file's size is checked before).
  auto t = ParseGpt2Files(std::string((64 << 20) + 1, ' '), "", "v.json", "m.txt");
  EXPECT_EQ(t.status().message(), "v.json: more than 67108864 bytes, the limit for a vocab.json");
  t = ParseGpt2Files(VocabJson(), std::string((64 << 20) + 1, '\n'), "v.json", "m.txt");
  EXPECT_EQ(t.status().message(), "m.txt: more than 67108864 bytes, the limit for a merges.txt");
}

TEST(Gpt2FilesLimits, AnEmptyOrCutMergesTxtIsRefusedNamingAnUnreachableToken) {
  const std::string vocab = VocabJson({BytesToGpt2Text("ab"), BytesToGpt2Text("abc"), BytesToGpt2Text(" the")});
  auto t = ParseGpt2Files(vocab, "", "v.json", "m.txt");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "m.txt: no merge makes token \"ab\" (id 256 of v.json), so it is never encoded; "
                                  "is the file cut short? (0 merges for 259 tokens)");
  t = ParseGpt2Files(vocab, "#version: 0.2\na b\nab c\n", "v.json", "m.txt");
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Has(std::string(t.status().message()), "m.txt: no merge makes token \"\u0120the\" (id 258 of v.json)"))
      << t.status();
  // A merge of a token that is itself unreachable does not make its result reachable.
  t = ParseGpt2Files(VocabJson({"ab", "abc", "zz"}), "#version: 0.2\nab c\n", "v.json", "m.txt");
  EXPECT_TRUE(Has(std::string(t.status().message()), "no merge makes token \"ab\"")) << t.status();
  // Merges in any order reach their results.
  std::string reversed = "#version: 0.2\n\u0120t he\n\u0120t h\n\u0120 t\nh e\nab c\na b\n";
  t = ParseGpt2Files(VocabJson({"ab", "abc", "he", "\u0120t", "\u0120th", "\u0120the"}), reversed, "v.json", "m.txt");
  EXPECT_TRUE(t.ok()) << t.status();
}

TEST(Gpt2FilesLimits, AMissingTokenIsNamedShortly) {
  const std::string vocab = VocabJson({"ab"});
  auto t = ParseGpt2Files(vocab, "#version: 0.2\na b\nzq b\n", "v.json", "m.txt");
  EXPECT_EQ(t.status().message(), "m.txt line 3: token \"zq\" is not in the vocabulary");
  t = ParseGpt2Files(vocab, "a zq\n", "v.json", "m.txt");
  EXPECT_EQ(t.status().message(), "m.txt line 1: token \"zq\" is not in the vocabulary");
  const std::string long_token(3000, 'x');
  t = ParseGpt2Files(vocab, "a " + long_token + "\n", "v.json", "m.txt");
  EXPECT_EQ(t.status().message(), "m.txt line 1: token \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"... (3000 bytes) is "
                                  "not in the vocabulary");
}

TEST(Gpt2FilesLimits, SpecialAndAddedTokensNeedNoMergeAndSurviveSaving) {
  // <|endoftext|> (table characters, written <...>), an added token (a
  // character outside the table) and a mixed one.
  const std::string vocab = VocabJson({BytesToGpt2Text("ab"), "<|endoftext|>", "\u4e2d\u6587", "\u0120\u4e2d", "<pad>"});
  auto t = ParseGpt2Files(vocab, "#version: 0.2\na b\n", "v.json", "m.txt");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Decode({257, 258, 259, 260}), "<|endoftext|>\u4e2d\u6587 \u4e2d<pad>");
  TempDir dir("psync_toklim");
  ASSERT_TRUE(SaveTokenizer(*t, dir.File("tok")).ok());
  auto back = LoadTokenizer(dir.File("tok"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->vocab(), t->vocab());
  EXPECT_EQ(back->Encode("ab"), (std::vector<int32_t>{256}));
}

TEST(Gpt2FilesLimits, JsonErrorsAreOneShortLine) {
  for (const std::string& bad : {std::string("{\"a\": tru"), std::string("[1, 2]"), std::string("{\"a\": 1.5}"),
                                 std::string("{\"a\": 0, \"a\": 1}"), std::string("{\"a\": 0, \"b\": 0}"),
                                 std::string("{\"a\": {\"b\": 0}}"), std::string("{} x"), std::string("{}"),
                                 std::string("{\"\\u0000") + std::string(5000, 'q') + "\": 0",
                                 std::string("{\"\xff\": 0}"), std::string("")}) {
    auto t = ParseGpt2Files(bad, "", "v.json", "m.txt");
    ASSERT_FALSE(t.ok()) << json::Quote(bad);
    const std::string m(t.status().message());
    EXPECT_EQ(m.rfind("v.json", 0), 0u) << m;
    EXPECT_LT(m.size(), kMaxMessageChars) << m;
  }
  EXPECT_EQ(ParseGpt2Files("{\"a\": 0, \"a\": 1}", "", "v.json", "m.txt").status().message(),
            "v.json line 1: token \"a\" appears twice");
  EXPECT_EQ(ParseGpt2Files("{\"a\": 0, \"b\": 0}", "", "v.json", "m.txt").status().message(),
            "v.json line 1: id 0 is used twice (by \"a\" and \"b\"); ids must be 0..V-1, each once");
  EXPECT_EQ(ParseGpt2Files("[1]", "", "v.json", "m.txt").status().message(),
            "v.json line 1: expected a JSON object {\"token\": id, ...}, got an array");
}

}  // namespace
}  // namespace psync::tokenizer
