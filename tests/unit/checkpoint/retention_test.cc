// --keep-checkpoints=K: the newest K stay, older ones go only after the new
// one is written, the just-written one is never deleted, and leftovers of
// interrupted writes are cleaned up.
#include "worker/checkpoint/retention.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/common/temp_dir.h"
#include "tests/unit/checkpoint/checkpoint_test_util.h"
#include "worker/checkpoint/directory.h"
#include "worker/checkpoint/format.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/training_state.h"
#include "worker/checkpoint/writer.h"

namespace psync::checkpoint {
namespace {

using namespace testing;  // NOLINT
using test_support::TempDir;

std::vector<int64_t> Steps(const std::string& dir) {
  auto listing = ListCheckpointDir(dir);
  EXPECT_TRUE(listing.ok()) << listing.status();
  std::vector<int64_t> out;
  for (const CheckpointFile& f : listing->checkpoints) out.push_back(f.step);
  return out;
}

absl::StatusOr<WrittenCheckpoint> Write(const std::string& dir, Training& t, int64_t step, int keep) {
  WriteOptions opt;
  opt.keep = keep;
  return WriteCheckpoint(dir, CaptureTrainingState(t.model->named_parameters(), t.optimizer.get(), FullManifest(step)),
                         opt);
}

TEST(Retention, KeepsTheNewestK) {
  TempDir dir("ckpt_keep");
  Training t = MakeTraining("adamw");
  for (int64_t s = 1; s <= 5; ++s) {
    auto w = Write(dir.path(), t, s, /*keep=*/2);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(w->retention_errors.empty());
    if (s >= 3) {
      EXPECT_EQ(w->removed, std::vector<std::string>{CheckpointPath(dir.path(), s - 2)});
    }
  }
  EXPECT_EQ(Steps(dir.path()), (std::vector<int64_t>{5, 4}));
}

TEST(Retention, ZeroKeepsAll) {
  TempDir dir("ckpt_keepall");
  Training t = MakeTraining("sgd");
  for (int64_t s = 10; s <= 40; s += 10) ASSERT_TRUE(Write(dir.path(), t, s, /*keep=*/0).ok());
  EXPECT_EQ(Steps(dir.path()), (std::vector<int64_t>{40, 30, 20, 10}));
}

TEST(Retention, NegativeKeepIsRefused) {
  TempDir dir("ckpt_keepneg");
  Training t = MakeTraining("sgd");
  auto st = Write(dir.path(), t, 1, -1).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("keep is -1"), absl::string_view::npos) << st;
  EXPECT_TRUE(Steps(dir.path()).empty());
}

// A torn file of a higher step (an earlier run crashed writing it; this run
// resumed from an older one) sorts first, but the checkpoint just written
// is never deleted: with K=1 both stay, and the next resume takes the new one.
TEST(Retention, NeverDeletesTheCheckpointJustWritten) {
  TempDir dir("ckpt_protect");
  Training t = MakeTraining("adamw");
  ASSERT_TRUE(Write(dir.path(), t, 1, 0).ok());
  ASSERT_TRUE(Write(dir.path(), t, 2, 0).ok());
  WriteFileBytes(CheckpointPath(dir.path(), 9), "torn");
  auto w = Write(dir.path(), t, 3, /*keep=*/1);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(Steps(dir.path()), (std::vector<int64_t>{9, 3}));
  auto latest = FindLatestCheckpoint(dir.path());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, CheckpointPath(dir.path(), 3));
}

TEST(Retention, RemovesLeftoverTempFilesUpToTheWrittenStep) {
  TempDir dir("ckpt_tmpclean");
  Training t = MakeTraining("adamw");
  const std::string old_tmp = CheckpointPath(dir.path(), 2) + ".tmp.AbC123";
  const std::string same_tmp = CheckpointPath(dir.path(), 5) + ".tmp.XyZ789";
  const std::string newer_tmp = CheckpointPath(dir.path(), 7) + ".tmp.QwE456";
  for (const auto& p : {old_tmp, same_tmp, newer_tmp}) WriteFileBytes(p, "half a checkpoint");
  auto w = Write(dir.path(), t, 5, /*keep=*/0);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(std::filesystem::exists(old_tmp));
  EXPECT_FALSE(std::filesystem::exists(same_tmp));
  EXPECT_TRUE(std::filesystem::exists(newer_tmp));
  EXPECT_EQ(w->removed.size(), 2u);
}

TEST(Retention, RewritingAStepReplacesIt) {
  TempDir dir("ckpt_rewrite");
  Training t = MakeTraining("adamw");
  ASSERT_TRUE(Write(dir.path(), t, 4, 1).ok());
  TrainStep(t, 0);
  ASSERT_TRUE(Write(dir.path(), t, 4, 1).ok());
  EXPECT_EQ(Steps(dir.path()), std::vector<int64_t>{4});
  auto back = ReadCheckpoint(CheckpointPath(dir.path(), 4));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectBitEqual(back->params, ParamData(*t.model));
}

// The directory is created (parents too); a trailing slash changes nothing.
TEST(Retention, CreatesTheDirectory) {
  TempDir dir("ckpt_mkdir");
  Training t = MakeTraining("adamw");
  auto w = Write(dir.File("runs/a/"), t, 1, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->path, dir.File("runs/a/ckpt-00000001.safetensors"));
  auto latest = FindLatestCheckpoint(dir.File("runs/a"));
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir.File("runs/a/ckpt-00000001.safetensors"));
}

// Other files in the directory are left alone.
TEST(Retention, IgnoresOtherFiles) {
  TempDir dir("ckpt_other");
  Training t = MakeTraining("adamw");
  WriteFileBytes(dir.File("notes.txt"), "x");
  WriteFileBytes(dir.File("ckpt-1.safetensors"), "x");
  for (int64_t s = 1; s <= 3; ++s) ASSERT_TRUE(Write(dir.path(), t, s, 1).ok());
  EXPECT_TRUE(std::filesystem::exists(dir.File("notes.txt")));
  EXPECT_TRUE(std::filesystem::exists(dir.File("ckpt-1.safetensors")));
  EXPECT_EQ(Steps(dir.path()), std::vector<int64_t>{3});
}

}  // namespace
}  // namespace psync::checkpoint
