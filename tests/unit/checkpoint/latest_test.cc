// FindLatestCheckpoint / LoadLatestCheckpoint (--resume): the newest
// checkpoint that loads, skipping (and reporting) damaged files and
// leftovers of interrupted writes, and stopping on problems that are not
// damage.
#include <gtest/gtest.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/checkpoint/checkpoint_test_util.h"
#include "worker/checkpoint/format.h"
#include "worker/checkpoint/manifest.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/training_state.h"
#include "worker/checkpoint/writer.h"
#include "worker/safetensors/safetensors.h"

namespace psync::checkpoint {
namespace {

using namespace testing;  // NOLINT
using test_support::TempDir;

class Latest : public ::testing::Test {
 protected:
  void Write(int64_t step) {
    auto w = WriteCheckpoint(dir_.path(), CaptureTrainingState(t_.model->named_parameters(), t_.optimizer.get(),
                                                               FullManifest(step)));
    ASSERT_TRUE(w.ok()) << w.status();
  }
  std::string Path(int64_t step) const { return CheckpointPath(dir_.path(), step); }

  TempDir dir_{"ckpt_latest"};
  Training t_ = MakeTraining("adamw");
};

TEST_F(Latest, MissingOrEmptyDirectoryHasNone) {
  auto latest = FindLatestCheckpoint(dir_.File("not-there"));
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, std::nullopt);
  latest = FindLatestCheckpoint(dir_.path());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, std::nullopt);
}

TEST_F(Latest, PicksTheHighestStepNotTheNewestFileOrName) {
  Write(9);
  Write(10);
  Write(100000000);  // 9 digits: sorts by number, not by name
  Write(2);          // written last
  auto latest = LoadLatestCheckpoint(dir_.path());
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->path, Path(100000000));
  EXPECT_EQ((*latest)->contents.manifest.step, 100000000);
}

TEST_F(Latest, SkipsACorruptNewestOneAndSaysWhy) {
  Write(1);
  Write(2);
  std::string bytes = ReadFileBytes(Path(2));
  bytes[bytes.size() - 3] ^= 0x40;  // a byte of the last tensor (optimizer state)
  WriteFileBytes(Path(2), bytes);
  std::vector<SkippedCheckpoint> skipped;
  auto latest = FindLatestCheckpoint(dir_.path(), &skipped);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, Path(1));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].path, Path(2));
  EXPECT_NE(skipped[0].reason.find("checksum"), std::string::npos) << skipped[0].reason;
  EXPECT_NE(skipped[0].reason.find(Path(2)), std::string::npos) << skipped[0].reason;
}

TEST_F(Latest, NoneLoadsMeansNone) {
  WriteFileBytes(Path(3), "");
  WriteFileBytes(Path(4), std::string(100, '\xff'));
  std::vector<SkippedCheckpoint> skipped;
  auto latest = FindLatestCheckpoint(dir_.path(), &skipped);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, std::nullopt);
  EXPECT_EQ(skipped.size(), 2u);
}

TEST_F(Latest, ARenamedFileIsSkipped) {
  Write(4);
  Write(5);
  std::filesystem::rename(Path(5), Path(6));
  std::vector<SkippedCheckpoint> skipped;
  auto latest = FindLatestCheckpoint(dir_.path(), &skipped);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, Path(4));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].reason.find("its name says step 6 but its manifest says step 5"), std::string::npos)
      << skipped[0].reason;
}

// A file from a newer psync is not damage: resuming from an older one would
// silently lose its progress, so the caller gets the error.
TEST_F(Latest, ANewerFormatVersionStopsTheSearch) {
  Write(1);
  Metadata md = *EncodeManifest(FullManifest(2));
  md["format_version"] = "2";
  ASSERT_TRUE(safetensors::Write(Path(2), {{"w", Tensor::Zeros({2})}}, md).ok());
  auto st = FindLatestCheckpoint(dir_.path()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find(Path(2)), absl::string_view::npos) << st;
}

// --resume's reader: a weights-only checkpoint (a --save file put in the
// directory) is not damage to skip past, nor training state to resume
// from: the caller gets an error naming it.
TEST_F(Latest, AWeightsOnlyFileIsRefusedByName) {
  Write(1);
  CheckpointManifest m = FullManifest(2);
  ASSERT_TRUE(WriteCheckpointFile(Path(2), CaptureTrainingState(t_.model->named_parameters(), nullptr, m)).ok());
  auto st = LoadLatestCheckpoint(dir_.path()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find(absl::StrCat("checkpoint ", Path(2), " holds weights only")), absl::string_view::npos)
      << st;
  EXPECT_NE(st.message().find("--init=" + Path(2)), absl::string_view::npos) << st;
}

TEST_F(Latest, ADirectoryThatIsAFileIsAnError) {
  WriteFileBytes(dir_.File("plain"), "x");
  auto st = FindLatestCheckpoint(dir_.File("plain")).status();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot list checkpoint directory " + dir_.File("plain")), absl::string_view::npos)
      << st;
}

}  // namespace
}  // namespace psync::checkpoint
