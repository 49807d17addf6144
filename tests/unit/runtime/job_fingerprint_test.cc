// The job's fingerprint (runtime/job_fingerprint.h): which settings it
// holds, under which names, and that the data's identity follows its
// contents, not its path.
#include "worker/runtime/job_fingerprint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "tests/common/temp_dir.h"
#include "worker/data/registry.h"

namespace psync::runtime {
namespace {

using test_support::TempDir;

data::OpenedData OpenBytes(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
  data::DataOptions o;
  o.path = path;
  o.format = "bytes";
  o.block_size = 8;
  absl::StatusOr<data::OpenedData> d = data::Open(o);
  EXPECT_TRUE(d.ok()) << d.status();
  return std::move(*d);
}

std::map<std::string, std::string> AsMap(const JobSettings& s) {
  std::map<std::string, std::string> m;
  for (const auto& [name, value] : s) EXPECT_TRUE(m.emplace(name, value).second) << "repeated " << name;
  return m;
}

TEST(JobFingerprint, ExactDoubleIsTheShortestSpellingThatReadsBack) {
  EXPECT_EQ(ExactDouble(0.003), "0.003");
  EXPECT_EQ(ExactDouble(0.1), "0.1");
  EXPECT_EQ(ExactDouble(1e-8), "1e-08");
  EXPECT_EQ(ExactDouble(0), "0");
  for (double v : {0.1 + 0.2, 1.0 / 3, 0.0030000000000000005, 6.02214076e23}) {
    EXPECT_EQ(std::strtod(ExactDouble(v).c_str(), nullptr), v) << ExactDouble(v);
  }
  EXPECT_NE(ExactDouble(0.003), ExactDouble(0.0030000000000000005));
}

TEST(JobFingerprint, HoldsTheMathAndNotThePaths) {
  TempDir dir;
  data::OpenedData d = OpenBytes(dir.File("a.txt"), std::string(200, 'x'));
  WorkerOptions opt;
  opt.model = "gpt";
  opt.lr = 0.003;
  opt.steps = 1330;
  opt.skip_layer = 1;
  opt.save_path = dir.File("w.safetensors");
  opt.checkpoint_dir = dir.path();
  nn::ModelOptions m;
  m.flags = nn::ModelFlags({{"n-head", "4"}, {"attention", "fused"}});
  m.vocab_size = 256;
  m.seed = 7;
  std::map<std::string, std::string> s = AsMap(JobFingerprint(opt, m, *d.train, d.val.get()));
  EXPECT_EQ(s["--model"], "gpt");
  EXPECT_EQ(s["--n-head"], "4") << "the GPT's own flags, under their names";
  EXPECT_EQ(s["--attention"], "fused");
  EXPECT_EQ(s["--vocab-size"], "256");
  EXPECT_EQ(s["--seed"], "7");
  EXPECT_EQ(s["--lr"], "0.003");
  EXPECT_EQ(s["--steps"], "1330");
  EXPECT_EQ(s["--skip-block"], "1") << "a GPT skips blocks";
  EXPECT_EQ(s["--optimizer"], "sgd");
  EXPECT_EQ(s["--precision"], "fp32");
  EXPECT_EQ(s["--zero"], "0");
  EXPECT_EQ(s["val data"], "none");
  EXPECT_EQ(s.count("model.num_classes"), 1u) << "what the data decides is under model.";
  for (const char* per_rank : {"--save", "--checkpoint-dir", "--data", "--trace", "--coordinator", "--rank"}) {
    EXPECT_EQ(s.count(per_rank), 0u) << per_rank << " may differ per rank";
  }
  for (const auto& [name, value] : s) EXPECT_EQ(value.find(dir.path()), std::string::npos) << name << " holds a path";
}

TEST(JobFingerprint, LongValuesAreSentAsAHeadAndAHash) {
  TempDir dir;
  data::OpenedData d = OpenBytes(dir.File("a.txt"), std::string(200, 'x'));
  WorkerOptions opt;
  nn::ModelOptions m;
  m.widths.assign(400, 1000);  // "1000,1000,...": 2 KB, over the wire's 1 KiB per value
  std::map<std::string, std::string> a = AsMap(JobFingerprint(opt, m, *d.train, nullptr));
  m.widths.back() = 1001;
  std::map<std::string, std::string> b = AsMap(JobFingerprint(opt, m, *d.train, nullptr));
  EXPECT_LE(a["--widths"].size(), 300u) << a["--widths"];
  EXPECT_NE(a["--widths"].find("(1999 bytes, hash "), std::string::npos) << a["--widths"];
  EXPECT_NE(a["--widths"], b["--widths"]) << "a difference past the head still differs";
}

TEST(JobFingerprint, TheDataIdentityFollowsTheContentsNotThePath) {
  TempDir dir;
  const std::string text = "the quick brown fox jumps over the lazy dog, again and again and again.";
  data::OpenedData a = OpenBytes(dir.File("a.txt"), text);
  data::OpenedData b = OpenBytes(dir.File("b.txt"), text);
  std::string other = text;
  other[60] = 'X';  // in the last example (window 7: tokens 56..64 of 73), a sampled one
  data::OpenedData c = OpenBytes(dir.File("c.txt"), other);
  EXPECT_EQ(DataIdentity(*a.train), DataIdentity(*b.train));
  EXPECT_NE(DataIdentity(*a.train), DataIdentity(*c.train));
  EXPECT_NE(DataIdentity(*a.train).find("examples of [8]"), std::string::npos) << DataIdentity(*a.train);
}

}  // namespace
}  // namespace psync::runtime
