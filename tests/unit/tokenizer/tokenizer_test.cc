// worker/tokenizer: GPT-2's pre-tokenization and BPE against GPT-2's own
// encoder.py (gpt2_reference.py, on a vocab.json + merges.txt pair it
// trains), exact round trips on arbitrary bytes, deterministic training,
// the GPT-2 files, chunked encoding and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "worker/tokenizer/bpe_trainer.h"
#include "worker/tokenizer/gpt2_files.h"
#include "worker/tokenizer/pretokenizer.h"

namespace psync::tokenizer {
namespace {

using test_support::TempDir;

const char kPython[] = "/usr/bin/python3";
const std::string kReference = std::string(PSYNC_TOKENIZER_TEST_DIR) + "/gpt2_reference.py";

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}
void WriteAll(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::vector<std::string> Pieces(absl::string_view text) {
  std::vector<std::string> out;
  ForEachPiece(text, [&](absl::string_view p) { out.emplace_back(p); });
  return out;
}

// Text that exercises every branch of GPT-2's pattern: contractions (and
// their look-alikes), the optional space, runs of each class, whitespace
// runs before text and at the end, and Unicode letters, marks, numbers and
// spaces outside ASCII.
std::vector<std::string> HandPickedTexts() {
  return {
      "Hello world! I'm here, don't worry; they'll've WE'RE 's 'S ''s ''' 're're 'd'm't",
      "a  b\n\n\nc   \n d\t\te end   ",
      " leading",
      "   ",
      "\n",
      "x\r\ny",
      "naïve café Ünïcödé 中文字符测试 カタカナ 👍🏽 🎉 مرحبا e\u0301 ٣٤٥ Ⅻ ½ a\u00a0b c\u2003d \u3000x \u200bz",
      "\u0085y \x1c\x1fq \x0b\x0c!",
      std::string("nul\0byte", 8),
      "12345 67.8 $100,000.00 3rd 4th 1st v2.0 0x1F",
      "    def f(x):\n        return x  # comment\n",
      "Q: What's the difference?\nA: It's    simple -- really!!!\n\n\t-- Someone\n",
  };
}

// Random strings from a pool of code points of every class.
std::vector<std::string> RandomTexts(int n, uint64_t seed) {
  const std::vector<std::string> pool = {
      " ", " ", " ", "\t", "\n", "\r", "\x0b", "\x1c", "\u0085", "\u00a0", "\u2003", "\u3000", "\u200b", "'", "'",
      "s", "t", "r", "e", "v", "m", "l", "d", "S", "R", "E", "a", "é", "中", "1", "7", "٣", "½", "!", "?", ".",
      ",", "-", "👍", "\u0301", "ß", "Ω", "я"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string s;
    const int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) s += pool[rng() % pool.size()];
    out.push_back(s);
  }
  return out;
}

TEST(Gpt2Reference, IdsAndPiecesMatchGpt2sEncoderPy) {
  if (test_support::SpawnAndCapture({kPython, "-c", "import json"}).code != 0) GTEST_SKIP() << "no " << kPython;
  TempDir dir("psync_tok");
  std::vector<std::string> texts = HandPickedTexts();
  for (std::string& t : RandomTexts(3000, 7)) texts.push_back(std::move(t));
  json::Json list = json::Json::array();
  for (const std::string& t : texts) list.push_back(t);
  WriteAll(dir.File("texts.json"), json::Serialize(list));
  // The reference trains the pair from the texts themselves, so its merges
  // apply to them (300 merges: multi-byte characters, words, space runs).
  test_support::SpawnResult made =
      test_support::SpawnAndCapture({kPython, kReference, "make-files", dir.File("gpt2"), dir.File("texts.json"), "300"});
  ASSERT_EQ(made.code, 0) << made.output;
  test_support::SpawnResult enc = test_support::SpawnAndCapture(
      {kPython, kReference, "encode", dir.File("gpt2"), dir.File("texts.json"), dir.File("want.json")});
  ASSERT_EQ(enc.code, 0) << enc.output;
  absl::StatusOr<json::Json> want = json::Parse(ReadAll(dir.File("want.json")));
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->size(), texts.size());

  absl::StatusOr<BpeTokenizer> tok = LoadTokenizer(dir.File("gpt2"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->vocab_size(), 256 + 300 + 1);  // bytes, merges, <|endoftext|>
  int64_t total_ids = 0, merged = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const json::Json& w = (*want)[i];
    ASSERT_EQ(Pieces(texts[i]), w["pieces"].get<std::vector<std::string>>()) << "text " << i << ": " << json::Quote(texts[i]);
    std::vector<int32_t> ids = tok->Encode(texts[i]);
    ASSERT_EQ(ids, w["ids"].get<std::vector<int32_t>>()) << "text " << i << ": " << json::Quote(texts[i]);
    total_ids += static_cast<int64_t>(ids.size());
    merged += std::count_if(ids.begin(), ids.end(), [](int32_t id) { return id >= 256; });
    absl::StatusOr<std::string> back = tok->Decode(std::vector<int64_t>(ids.begin(), ids.end()));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, texts[i]);
  }
  EXPECT_GT(merged, total_ids / 4) << "the merges should apply to much of the text";
  // <|endoftext|> decodes to its text, as in GPT-2.
  EXPECT_EQ(*tok->Decode({tok->vocab_size() - 1}), "<|endoftext|>");
}

BpeTokenizer TrainOn(const std::string& text, int64_t vocab_size) {
  BpeTrainer t;
  t.AddText(text);
  TrainOptions o;
  o.vocab_size = vocab_size;
  absl::StatusOr<BpeTokenizer> out = t.Train(o);
  EXPECT_TRUE(out.ok()) << out.status();
  return *std::move(out);
}

std::string SampleCorpus() {
  std::string s;
  for (const std::string& t : HandPickedTexts()) s += t + "\n";
  for (const std::string& t : RandomTexts(500, 3)) s += t + " the quick brown fox jumps over the lazy dog. ";
  return s;
}

TEST(Bpe, RoundTripsArbitraryBytesExactly) {
  BpeTokenizer tok = TrainOn(SampleCorpus(), 600);
  std::mt19937_64 rng(11);
  std::vector<std::string> inputs = {
      "", "\xff", "\xc3", "\xe4\xb8", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "\x80\x80 abc \xfe", "a\xc3 b",
      std::string(300, ' ') + "x" + std::string(5000, 'a'), "\xf0\x9f\x91\x8d\xf0\x9f", std::string(3, '\0')};
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? (rng() % 256) : " \n\tae'sé\xc3\xa9"[rng() % 11]);
    inputs.push_back(s);
  }
  for (const std::string& s : inputs) {
    std::string joined;
    for (const std::string& p : Pieces(s)) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, s);
    std::vector<int32_t> ids = tok.Encode(s);
    absl::StatusOr<std::string> back = tok.Decode(std::vector<int64_t>(ids.begin(), ids.end()));
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(*back, s) << json::Quote(s);
  }
}

TEST(Bpe, InvalidUtf8BytesArePunctuationUnits) {
  // An invalid byte is one unit of class "other": it joins a run of
  // punctuation and ends a run of letters.
  EXPECT_EQ(Pieces("ab\xff!c"), (std::vector<std::string>{"ab", "\xff!", "c"}));
  EXPECT_EQ(Pieces(" \xc3x"), (std::vector<std::string>{" \xc3", "x"}));
  EXPECT_EQ(Pieces("\xed\xa0\x80"), (std::vector<std::string>{"\xed\xa0\x80"}));  // a surrogate: 3 "other" units
  EXPECT_EQ(Pieces("caf\xc3\xa9!"), (std::vector<std::string>{"caf\xc3\xa9", "!"}));
}

TEST(Bpe, TrainingIsDeterministic) {
  const std::string corpus = SampleCorpus();
  BpeTokenizer a = TrainOn(corpus, 700);
  BpeTokenizer b = TrainOn(corpus, 700);
  EXPECT_EQ(a.vocab(), b.vocab());
  ASSERT_EQ(a.merges().size(), b.merges().size());
  for (size_t i = 0; i < a.merges().size(); ++i) {
    EXPECT_EQ(a.merges()[i].left, b.merges()[i].left);
    EXPECT_EQ(a.merges()[i].right, b.merges()[i].right);
  }
  // Counting the same text in two calls changes nothing either.
  BpeTrainer split;
  split.AddText(corpus.substr(0, corpus.size() / 2));
  const size_t cut = SafeCut(corpus, corpus.size() / 2);
  BpeTrainer halves;
  halves.AddText(corpus.substr(0, cut));
  halves.AddText(corpus.substr(cut));
  TrainOptions o;
  o.vocab_size = 700;
  EXPECT_EQ(halves.Train(o)->vocab(), a.vocab());
}

TEST(Bpe, TrainsTheMostFrequentPairFirstWithTiesToTheSmallerPair) {
  // Pieces "aaab" x1, " aaab" x2, " cd" x3. (a,a) occurs 6 times (twice a
  // piece); then (' ',c), (a,b), (c,d) and (aa,a) 3 times each: the smaller
  // ids win, (' '=32, c) before (a=97, b).
  BpeTokenizer t = TrainOn("aaab aaab aaab cd cd cd", 259);
  ASSERT_EQ(t.merges().size(), 3u);
  EXPECT_EQ(t.token_bytes(256), "aa");
  EXPECT_EQ(t.token_bytes(257), " c");
  EXPECT_EQ(t.token_bytes(258), "ab");
  EXPECT_EQ(t.Encode("aaab cd"), (std::vector<int32_t>{256, 258, 257, 'd'}));
}

TEST(Bpe, StopsWhenNoPairIsFrequentEnough) {
  BpeTokenizer t = TrainOn("ab ab cd", 1000);
  EXPECT_LT(t.vocab_size(), 1000);
  for (const MergeRule& m : t.merges()) EXPECT_GE(m.result, 256);
}

TEST(Bpe, SavedFilesLoadBackTheSameTokenizer) {
  TempDir dir("psync_tok");
  BpeTokenizer t = TrainOn(SampleCorpus(), 650);
  ASSERT_TRUE(SaveTokenizer(t, dir.File("tok")).ok());
  EXPECT_EQ(ReadAll(dir.File("tok/merges.txt")).substr(0, 14), "#version: 0.2\n");
  absl::StatusOr<BpeTokenizer> back = LoadTokenizer(dir.File("tok/vocab.json"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->vocab(), t.vocab());
  const std::string text = SampleCorpus();
  EXPECT_EQ(back->Encode(text), t.Encode(text));
  // GPT-2's spelling of bytes: a space is "Ġ", a newline "Ċ".
  EXPECT_EQ(BytesToGpt2Text(" \n"), "\u0120\u010a");
}

TEST(Bpe, ChunksCutBySafeCutEncodeLikeTheWhole) {
  BpeTokenizer t = TrainOn(SampleCorpus(), 600);
  std::string text;
  for (const std::string& s : RandomTexts(3000, 5)) text += s + (s.size() % 3 == 0 ? "\n" : "x\n");
  const std::vector<int32_t> whole = t.Encode(text);
  std::vector<int32_t> parts;
  int cuts = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = SafeCut(text, std::min(text.size(), pos + 97));
    t.Encode(absl::string_view(text).substr(pos, end - pos), &parts);
    pos = end;
    ++cuts;
  }
  EXPECT_GT(cuts, 100);
  EXPECT_EQ(parts, whole);
}

TEST(Gpt2Files, ErrorsNameTheFileAndTheEntry) {
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    vocab += (b ? "," : "") + json::Quote(BytesToGpt2Text(std::string(1, static_cast<char>(b)))) + ":" + std::to_string(b);
  }
  const std::string ab = BytesToGpt2Text("ab");
  const std::string good = vocab + "," + json::Quote(ab) + ":256}";
  EXPECT_TRUE(ParseGpt2Files(good, "#version: 0.2\na b\n", "v.json", "m.txt").ok());
  auto msg = [](const absl::StatusOr<BpeTokenizer>& t) { return std::string(t.status().message()); };
  EXPECT_EQ(msg(ParseGpt2Files(good, "#version: 0.2\na b c\n", "v.json", "m.txt")),
            "m.txt line 2: \"a b c\" is not two tokens separated by one space");
  EXPECT_EQ(msg(ParseGpt2Files(good, "b c\n", "v.json", "m.txt")),
            "m.txt line 1: the merged token \"bc\" is not in the vocabulary");
  EXPECT_EQ(msg(ParseGpt2Files(vocab + "," + json::Quote(ab) + ":300}", "", "v.json", "m.txt")),
            "v.json line 1: token \"ab\" has id 300, but there are 257 tokens; ids must be 0..V-1, each once");
  // Without byte 0x0a ("Ċ") there is no token for a newline.
  std::string no_newline = good;
  no_newline.replace(no_newline.find(json::Quote("\u010a")), json::Quote("\u010a").size(), json::Quote("zz"));
  EXPECT_NE(msg(ParseGpt2Files(no_newline, "", "v.json", "m.txt")).find("no token is the single byte 0x0a"), std::string::npos);
  EXPECT_EQ(LoadTokenizer("/nonexistent/tok").status().code(), absl::StatusCode::kNotFound);
  BpeTrainer t;
  TrainOptions o;
  o.vocab_size = 65537;
  t.AddText("abc");
  EXPECT_EQ(t.Train(o).status().message(), "--vocab-size=65537: expected 256 (the bytes) to 65536 (token files hold uint16 ids)");
}

}  // namespace
}  // namespace psync::tokenizer
