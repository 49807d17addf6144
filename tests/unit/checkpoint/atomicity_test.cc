// The atomicity contract: a checkpoint cut off at any byte offset of
// its write is never loaded, and neither is one with any single flipped bit
// or a crashed writer's temporary file; the older good checkpoint is found
// instead.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>

#include "common/atomic_file.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/checkpoint/checkpoint_test_util.h"
#include "worker/checkpoint/format.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/training_state.h"
#include "worker/checkpoint/writer.h"

namespace psync::checkpoint {
namespace {

using namespace testing;  // NOLINT
using test_support::TempDir;

// A directory with a good checkpoint of step 1, and the bytes of a good
// checkpoint of step 2 (a few KB).
class Atomicity : public ::testing::Test {
 protected:
  void SetUp() override {
    Training t = MakeTraining("adamw");
    TrainStep(t, 0);
    ASSERT_TRUE(WriteCheckpoint(dir_.path(), Capture(t, 1)).ok());
    TrainStep(t, 1);
    auto w = WriteCheckpoint(dir_.path(), Capture(t, 2));
    ASSERT_TRUE(w.ok()) << w.status();
    newest_ = w->path;
    good_bytes_ = ReadFileBytes(newest_);
    ASSERT_TRUE(ReadCheckpoint(newest_).ok());
  }

  static CheckpointContents Capture(Training& t, int64_t step) {
    return CaptureTrainingState(t.model->named_parameters(), t.optimizer.get(), FullManifest(step));
  }

  TempDir dir_{"ckpt_atomic"};
  std::string newest_, good_bytes_;
};

TEST_F(Atomicity, CheckpointIsSmallEnoughToTestEveryOffset) {
  RecordProperty("checkpoint_bytes", static_cast<int>(good_bytes_.size()));
  EXPECT_GT(good_bytes_.size(), 1000u);
  EXPECT_LT(good_bytes_.size(), 16000u);
}

// Every prefix of the newest file (lengths 0 .. size-1) stands in for a
// write cut off there: reading it fails with an error naming the file, and
// the search for the newest checkpoint returns the older good one.
TEST_F(Atomicity, EveryTruncationIsRejectedAndTheOlderOneIsFound) {
  const std::string older = CheckpointPath(dir_.path(), 1);
  for (size_t len = 0; len < good_bytes_.size(); ++len) {
    SCOPED_TRACE(::testing::Message() << "prefix of " << len << " of " << good_bytes_.size() << " bytes");
    WriteFileBytes(newest_, good_bytes_.substr(0, len));
    auto read = ReadCheckpoint(newest_);
    ASSERT_FALSE(read.ok());
    ASSERT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << read.status();
    ASSERT_NE(read.status().message().find(newest_), absl::string_view::npos) << read.status();

    std::vector<SkippedCheckpoint> skipped;
    auto latest = FindLatestCheckpoint(dir_.path(), &skipped);
    ASSERT_TRUE(latest.ok()) << latest.status();
    ASSERT_EQ(*latest, older);
    ASSERT_EQ(skipped.size(), 1u);
    ASSERT_EQ(skipped[0].path, newest_);
  }
  WriteFileBytes(newest_, good_bytes_);
  EXPECT_EQ(*FindLatestCheckpoint(dir_.path()), newest_);
}

// Any single flipped bit anywhere (length prefix, header, padding, data) is
// caught: by the structure checks, the manifest checks or the checksum.
TEST_F(Atomicity, EverySingleBitFlipIsRejected) {
  for (size_t i = 0; i < good_bytes_.size(); ++i) {
    std::string bytes = good_bytes_;
    bytes[i] = static_cast<char>(bytes[i] ^ (1 << (i % 8)));
    WriteFileBytes(newest_, bytes);
    auto read = ReadCheckpoint(newest_);
    ASSERT_FALSE(read.ok()) << "flipping bit " << i % 8 << " of byte " << i << " went unnoticed; around it: "
                            << ::testing::PrintToString(good_bytes_.substr(i < 40 ? 0 : i - 40, 80));
    ASSERT_NE(read.status().message().find(newest_), absl::string_view::npos) << read.status();
  }
}

TEST_F(Atomicity, CorruptDataByteIsAChecksumError) {
  std::string bytes = good_bytes_;
  bytes[bytes.size() / 2 + bytes.size() / 4] ^= 0x01;  // in the data section (well after the header)
  WriteFileBytes(newest_, bytes);
  auto st = ReadCheckpoint(newest_).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find(absl::StrCat("checkpoint ", newest_, ": metadata \"checksum\" is crc32:")),
            absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("the file is corrupt"), absl::string_view::npos) << st;
}

// A writer killed (SIGKILL, no destructors) halfway through writing step 3
// leaves only its temporary file: it is never loaded, the search returns
// step 2 and reports the leftover, and the next write removes it.
TEST_F(Atomicity, CrashedWriterLeavesATempFileThatIsNeverPicked) {
  const std::string target = CheckpointPath(dir_.path(), 3);
  auto results = test_support::RunRanks(
      1,
      [&](int) {
        AtomicFileWriter w;
        if (!w.Open(target).ok() || !w.Append(good_bytes_.substr(0, good_bytes_.size() / 2)).ok()) return 1;
        ::raise(SIGKILL);
        return 2;
      },
      std::chrono::seconds(30));
  ASSERT_EQ(results[0].code, -SIGKILL);
  ASSERT_FALSE(std::filesystem::exists(target));
  std::string leftover;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) {
    if (e.path().filename().string().rfind("ckpt-00000003.safetensors.tmp.", 0) == 0) leftover = e.path().string();
  }
  ASSERT_FALSE(leftover.empty()) << "the killed writer left no temporary file";
  EXPECT_FALSE(ReadCheckpoint(leftover).ok());

  std::vector<SkippedCheckpoint> skipped;
  auto latest = FindLatestCheckpoint(dir_.path(), &skipped);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, newest_);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].path, leftover);
  EXPECT_NE(skipped[0].reason.find("interrupted write"), std::string::npos);

  Training t = MakeTraining("adamw");
  auto w = WriteCheckpoint(dir_.path(), Capture(t, 3));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(std::filesystem::exists(leftover));
  EXPECT_EQ(*FindLatestCheckpoint(dir_.path()), target);
}

// WriteOptions::may_commit (a training run: "is my generation still
// running?"): refused right before the rename, the write leaves the
// directory exactly as it was (no new file, no temporary file, nothing
// deleted) and returns the guard's own status.
TEST_F(Atomicity, RefusedBeforeTheRenameChangesNothing) {
  Training t = MakeTraining("adamw");
  WriteOptions w;
  w.keep = 1;  // would delete both older checkpoints
  int asked = 0;
  w.may_commit = [&] {
    ++asked;
    return absl::AbortedError("generation 1 aborted");
  };
  auto out = WriteCheckpoint(dir_.path(), Capture(t, 3), w);
  EXPECT_EQ(out.status(), absl::AbortedError("generation 1 aborted")) << "returned as is, not annotated";
  EXPECT_EQ(asked, 1);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path())) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"ckpt-00000001.safetensors", "ckpt-00000002.safetensors"}));
}

// Refused after the rename (the abort arrived meanwhile): the file stays (it
// is complete), but retention deletes nothing and says why.
TEST_F(Atomicity, RefusedAfterTheRenameSkipsRetention) {
  Training t = MakeTraining("adamw");
  WriteOptions w;
  w.keep = 1;
  int asked = 0;
  w.may_commit = [&] { return ++asked == 1 ? absl::OkStatus() : absl::AbortedError("generation 1 aborted"); };
  auto out = WriteCheckpoint(dir_.path(), Capture(t, 3), w);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(asked, 2);
  EXPECT_TRUE(out->removed.empty());
  EXPECT_EQ(out->retention_errors, std::vector<std::string>{"retention skipped: generation 1 aborted"});
  EXPECT_TRUE(std::filesystem::exists(CheckpointPath(dir_.path(), 1)));
  EXPECT_TRUE(ReadCheckpoint(out->path).ok());
}

// The resume agreement's listing: the newest loadable checkpoints, newest
// first, damaged ones skipped, the newest one's contents kept; max_step
// hides the newer ones (a listing made before they were written).
TEST_F(Atomicity, ListLoadableCheckpointsOffersTheNewestFew) {
  Training t = MakeTraining("adamw");
  ASSERT_TRUE(WriteCheckpoint(dir_.path(), Capture(t, 3)).ok());
  WriteFileBytes(CheckpointPath(dir_.path(), 4), good_bytes_.substr(0, good_bytes_.size() / 2));  // torn
  std::vector<SkippedCheckpoint> skipped;
  auto found = ListLoadableCheckpoints(dir_.path(), 2, INT64_MAX, &skipped);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->steps, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(found->paths, (std::vector<std::string>{CheckpointPath(dir_.path(), 3), newest_}));
  ASSERT_TRUE(found->newest.has_value());
  EXPECT_EQ(found->newest->contents.manifest.step, 3);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].path, CheckpointPath(dir_.path(), 4));

  found = ListLoadableCheckpoints(dir_.path(), 3, /*max_step=*/2);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->steps, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(found->newest->path, newest_);
}

}  // namespace
}  // namespace psync::checkpoint
