// The manifest's metadata encoding: every field round-trips, writers refuse
// a bad manifest, readers refuse missing, malformed and unknown keys and
// other format versions, naming the file and the key.
#include "worker/checkpoint/manifest.h"

#include <gtest/gtest.h>

#include "tests/common/temp_dir.h"
#include "tests/unit/checkpoint/checkpoint_test_util.h"
#include "worker/checkpoint/checksum.h"
#include "worker/checkpoint/reader.h"
#include "worker/safetensors/safetensors.h"

namespace psync::checkpoint {
namespace {

using namespace testing;  // NOLINT

TEST(Manifest, EncodesEveryFieldAsDocumented) {
  auto md = EncodeManifest(FullManifest(12));
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(md->at("format"), "psync-checkpoint");
  EXPECT_EQ(md->at("format_version"), "1");
  EXPECT_EQ(md->at("step"), "12");
  EXPECT_EQ(md->at("model"), "mlp");
  EXPECT_EQ(md->at("model.widths"), "4,8,8,3");
  EXPECT_EQ(md->at("optimizer"), "adamw");
  EXPECT_EQ(md->at("data.cursor"), "1234567890123");
  EXPECT_EQ(md->at("data.shuffle_seed"), "-5");
  EXPECT_EQ(md->at("rng.data"), "0,1,18446744073709551615");
  EXPECT_EQ(md->at("rng.dropout"), "");
  EXPECT_EQ(md->at("world_size"), "2");
  EXPECT_EQ(md->at("bucket_plan"), R"({"buckets":[[0,1],[2,3,4,5]]})");
  EXPECT_EQ(md->count("checksum"), 0u);  // the writer adds it

  auto back = DecodeManifest(*md, "F");
  ASSERT_TRUE(back.ok()) << back.status();
  const CheckpointManifest want = FullManifest(12);
  EXPECT_EQ(back->step, 12);
  EXPECT_EQ(back->model_config, want.model_config);
  EXPECT_EQ(back->data_position, want.data_position);
  EXPECT_EQ(back->rng, want.rng);
  EXPECT_EQ(back->bucket_plan, want.bucket_plan);
}

TEST(Manifest, WriterRefusesABadManifest) {
  auto expect_error = [](CheckpointManifest m, const std::string& what) {
    auto st = EncodeManifest(m).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(st.message().find(what), absl::string_view::npos) << st;
  };
  CheckpointManifest m = FullManifest(1);
  m.step = -1;
  expect_error(m, "step is -1");
  m = FullManifest(1);
  m.world_size = 0;
  expect_error(m, "world_size is 0");
  m = FullManifest(1);
  m.model.clear();
  expect_error(m, "model (the --model kind) is empty");
  m = FullManifest(1);
  m.bucket_plan = "{buckets";
  expect_error(m, "bucket_plan is not JSON");
  m = FullManifest(1);
  m.data_position["a b"] = 1;
  expect_error(m, "data_position key \"a b\"");
  m = FullManifest(1);
  m.rng[""] = {1};
  expect_error(m, "rng key \"\"");
}

TEST(Manifest, ReaderNamesTheFileAndTheKey) {
  const Metadata good = *EncodeManifest(FullManifest(5));
  auto expect_error = [&](Metadata md, const std::string& what, absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
    auto st = DecodeManifest(md, "/ckpts/ckpt-00000005.safetensors").status();
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find("checkpoint /ckpts/ckpt-00000005.safetensors"), absl::string_view::npos) << st;
    EXPECT_NE(st.message().find(what), absl::string_view::npos) << st;
  };
  for (const char* key : {"format", "format_version", "step", "model", "optimizer", "world_size", "bucket_plan",
                          "psync_version"}) {
    Metadata md = good;
    md.erase(key);
    expect_error(md, absl::StrCat("\"", key, "\" is missing"));
  }
  Metadata md = good;
  md["format"] = "other";
  expect_error(md, "\"format\" is \"other\", expected \"psync-checkpoint\"");
  md = good;
  md["format_version"] = "2";
  expect_error(md, "format_version 2; this psync reads version 1 (the file was written by a newer psync)",
               absl::StatusCode::kFailedPrecondition);
  // Numbers have one spelling.
  for (const char* bad : {"+5", "05", " 5", "5 ", "-1", "5x", "", "99999999999999999999"}) {
    md = good;
    md["step"] = bad;
    expect_error(md, absl::StrCat("\"step\" is \"", bad, "\", expected an integer >= 0"));
  }
  md = good;
  md["world_size"] = "0";
  expect_error(md, "\"world_size\" is \"0\", expected an integer >= 1");
  md = good;
  md["data.epoch"] = "1.5";
  expect_error(md, "\"data.epoch\" is \"1.5\", expected an int64");
  md = good;
  md["rng.data"] = "1,,2";
  expect_error(md, "\"rng.data\" has \"\", expected uint64 words");
  md = good;
  md["rng.data"] = "1,-2";
  expect_error(md, "\"rng.data\" has \"-2\"");
  md = good;
  md["bucket_plan"] = "[1,";
  expect_error(md, "\"bucket_plan\" is not JSON");
  md = good;
  md["lr"] = "0.1";
  expect_error(md, "\"lr\" is not a key this psync knows");
  md = good;
  md["data."] = "1";
  expect_error(md, "\"data.\" is not a key this psync knows");
}

// The same checks through a real file: a plain safetensors file (weights
// saved by --save, or by PyTorch) is not mistaken for a checkpoint.
TEST(Manifest, PlainSafetensorsFileIsNotACheckpoint) {
  test_support::TempDir dir("ckpt_plain");
  const std::string path = dir.File("ckpt-00000001.safetensors");
  ASSERT_TRUE(safetensors::Write(path, {{"w", Tensor::Zeros({2})}}).ok());
  auto st = ReadCheckpoint(path).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(absl::StrCat("checkpoint ", path, ": metadata \"format\" is missing")),
            absl::string_view::npos) << st;
}

TEST(Manifest, ChecksumMissingOrMalformed) {
  test_support::TempDir dir("ckpt_nosum");
  const std::string path = dir.File("c.safetensors");
  Metadata md = *EncodeManifest(FullManifest(1));
  ASSERT_TRUE(safetensors::Write(path, {{"w", Tensor::Zeros({2})}}, md).ok());
  auto st = ReadCheckpoint(path).status();
  EXPECT_NE(st.message().find("metadata \"checksum\" is missing"), absl::string_view::npos) << st;
  md["checksum"] = "md5:00";
  ASSERT_TRUE(safetensors::Write(path, {{"w", Tensor::Zeros({2})}}, md).ok());
  st = ReadCheckpoint(path).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("\"checksum\" is md5:00 but the contents give crc32:"), absl::string_view::npos) << st;
  // The right checksum makes the hand-built file a valid checkpoint.
  md["checksum"] = *ContentChecksum(md, {{"w", Tensor::Zeros({2})}});
  ASSERT_TRUE(safetensors::Write(path, {{"w", Tensor::Zeros({2})}}, md).ok());
  EXPECT_TRUE(ReadCheckpoint(path).ok());
}

}  // namespace
}  // namespace psync::checkpoint
