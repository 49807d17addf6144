// The one reader of model weights (weights.h, psync-sample and --init) and
// the --save writer (WriteCheckpointFile): a --save file is a weights-only
// checkpoint; training checkpoints give their weights; the --save files of
// older psync (plain safetensors + model metadata) and plain state dicts
// still load; damage is reported naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <iterator>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/checkpoint/checkpoint_test_util.h"
#include "worker/checkpoint/build_info.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/training_state.h"
#include "worker/checkpoint/weights.h"
#include "worker/checkpoint/writer.h"
#include "worker/safetensors/safetensors.h"

namespace psync::checkpoint {
namespace {

using namespace testing;  // NOLINT
using test_support::TempDir;

class Weights : public ::testing::Test {
 protected:
  void SetUp() override { TrainStep(t_, 0); }

  // What psync-worker --save writes: the run's manifest, no optimizer.
  std::string WriteSaveFile(const std::string& name) {
    const std::string path = dir_.File(name);
    auto bytes = WriteCheckpointFile(path, CaptureTrainingState(t_.model->named_parameters(), nullptr, Manifest()));
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (bytes.ok()) {
      EXPECT_EQ(*bytes, std::filesystem::file_size(path));
    }
    return path;
  }
  static CheckpointManifest Manifest() {
    CheckpointManifest m;
    m.step = 16;
    m.model = "mlp";
    m.model_config = EncodeModelConfig(SmallMlpOptions());
    m.data_position = {{"next_step", 16}, {"global_batch", 8}};
    m.world_size = 2;
    return m;
  }
  void ExpectTrainedWeights(const absl::StatusOr<ModelWeights>& w) {
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->model.kind, "mlp");
    auto options = DecodeModelConfig(w->model, "test");
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_EQ(options->widths, SmallMlpOptions().widths);
    EXPECT_EQ(options->seed, SmallMlpOptions().seed);
    ExpectBitEqual(w->params, ParamData(*t_.model));
  }

  TempDir dir_{"ckpt_weights"};
  Training t_ = MakeTraining("adamw");
};

TEST_F(Weights, ASaveFileIsAWeightsOnlyCheckpoint) {
  const std::string path = WriteSaveFile("final.safetensors");
  // Exactly at the path: nothing else in the directory (no ckpt-<step> name, no retention).
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_.path()), std::filesystem::directory_iterator()),
            1);
  auto c = ReadCheckpoint(path, Need::kWeights);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->manifest.weights_only());
  EXPECT_TRUE(c->optimizer_state.empty());
  EXPECT_EQ(c->manifest.step, 16);
  EXPECT_EQ(c->manifest.world_size, 2);
  EXPECT_EQ(c->manifest.psync_version, PsyncBuildVersion());
  ExpectTrainedWeights(ReadModelWeights(path));
  // A plain safetensors reader (PyTorch, weights_diff) sees the parameters and nothing else.
  auto plain = safetensors::Read(path);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ExpectBitEqual(*plain, ParamData(*t_.model));
}

TEST_F(Weights, ATrainingCheckpointGivesItsWeightsWithoutOptimizerState) {
  CheckpointManifest m = Manifest();
  auto w = WriteCheckpoint(dir_.path(), CaptureTrainingState(t_.model->named_parameters(), t_.optimizer.get(), m));
  ASSERT_TRUE(w.ok()) << w.status();
  ExpectTrainedWeights(ReadModelWeights(w->path));
}

// The --save format of psync before --save wrote checkpoints, written here
// with the codec directly: parameters, "model", "model.<key>", "steps_completed".
TEST_F(Weights, AnOlderSaveFileStillLoads) {
  std::map<std::string, std::string> md = {{"model", "mlp"}, {"steps_completed", "16"}};
  for (const auto& [k, v] : EncodeModelConfig(SmallMlpOptions())) md[absl::StrCat("model.", k)] = v;
  const std::string path = dir_.File("old.safetensors");
  ASSERT_TRUE(safetensors::Write(path, ParamData(*t_.model), md).ok());
  ExpectTrainedWeights(ReadModelWeights(path));
}

TEST_F(Weights, APlainStateDictLoadsWithoutAModelRecord) {
  const std::string path = dir_.File("torch.safetensors");
  ASSERT_TRUE(safetensors::Write(path, ParamData(*t_.model)).ok());
  auto w = ReadModelWeights(path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->model.kind, "");
  EXPECT_TRUE(w->model.config.empty());
  ExpectBitEqual(w->params, ParamData(*t_.model));
}

TEST_F(Weights, ADamagedSaveFileIsRefusedByName) {
  const std::string path = WriteSaveFile("final.safetensors");
  std::string bytes = ReadFileBytes(path);
  bytes[bytes.size() - 2] ^= 0x01;  // a byte of the last parameter
  WriteFileBytes(path, bytes);
  auto w = ReadModelWeights(path);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << w.status();
  EXPECT_NE(w.status().message().find(absl::StrCat("checkpoint ", path, ": metadata \"checksum\"")),
            absl::string_view::npos) << w.status();
  WriteFileBytes(path, bytes.substr(0, bytes.size() / 2));
  w = ReadModelWeights(path);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument) << w.status();
  EXPECT_NE(w.status().message().find(path), absl::string_view::npos) << w.status();
}

TEST_F(Weights, ErrorsNameTheFile) {
  const std::string missing = dir_.File("no/such/dir/final.safetensors");
  auto st = WriteCheckpointFile(missing, CaptureTrainingState(t_.model->named_parameters(), nullptr, Manifest()));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find(missing), absl::string_view::npos) << st.status();
  auto w = ReadModelWeights(missing);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound) << w.status();
  EXPECT_NE(w.status().message().find(missing), absl::string_view::npos) << w.status();
}

}  // namespace
}  // namespace psync::checkpoint
