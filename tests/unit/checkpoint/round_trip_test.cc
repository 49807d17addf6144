// Checkpoints hold the training state exactly: a write/read round trip is
// bit-exact for parameters, optimizer state and every manifest field, and
// training resumed from a checkpoint ends with the same bits as training
// that never stopped. Also: loading into a model or optimizer that does not
// fit fails naming the tensor, and psync-sample's path (model rebuilt from
// the manifest alone).
#include <gtest/gtest.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/checkpoint/checkpoint_test_util.h"
#include "worker/checkpoint/build_info.h"
#include "worker/checkpoint/format.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/training_state.h"
#include "worker/checkpoint/weights.h"
#include "worker/checkpoint/writer.h"
#include "psync/nn/state_dict.h"
#include "worker/safetensors/safetensors.h"
#include "psync/tensor/device.h"

namespace psync::checkpoint {
namespace {

using namespace testing;  // NOLINT
using test_support::TempDir;

void ExpectSameManifest(const CheckpointManifest& got, const CheckpointManifest& want) {
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.model, want.model);
  EXPECT_EQ(got.model_config, want.model_config);
  EXPECT_EQ(got.optimizer, want.optimizer);
  EXPECT_EQ(got.data_position, want.data_position);
  EXPECT_EQ(got.rng, want.rng);
  EXPECT_EQ(got.world_size, want.world_size);
  EXPECT_EQ(got.bucket_plan, want.bucket_plan);
}

class RoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTrip, ParamsOptimizerStateAndManifestAreBitExact) {
  TempDir dir("ckpt_roundtrip");
  Training t = MakeTraining(GetParam());
  for (int s = 0; s < 3; ++s) TrainStep(t, s);
  CheckpointContents saved = CaptureTrainingState(t.model->named_parameters(), t.optimizer.get(), FullManifest(3));
  EXPECT_EQ(saved.manifest.optimizer, GetParam());
  auto written = WriteCheckpoint(dir.path(), saved);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->path, dir.File("ckpt-00000003.safetensors"));
  EXPECT_GT(written->bytes, 0u);
  EXPECT_TRUE(written->removed.empty());

  auto loaded = ReadCheckpoint(written->path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameManifest(loaded->manifest, saved.manifest);
  EXPECT_EQ(loaded->manifest.psync_version, PsyncBuildVersion());
  ExpectBitEqual(loaded->params, saved.params);
  ExpectBitEqual(loaded->optimizer_state, saved.optimizer_state);
  // Parameters keep the model's own names, so the file loads as a PyTorch state_dict.
  EXPECT_EQ(loaded->params.front().first, "layers.0.weight");
}

// The resume contract at the library level: train 6 steps without
// stopping; separately train 3, checkpoint, build a fresh model and optimizer
// (other initial weights), load, train 3 more: the same bits.
TEST_P(RoundTrip, ResumedTrainingEqualsUninterruptedTraining) {
  TempDir dir("ckpt_resume");
  Training straight = MakeTraining(GetParam());
  for (int s = 0; s < 6; ++s) TrainStep(straight, s);

  Training first = MakeTraining(GetParam());
  for (int s = 0; s < 3; ++s) TrainStep(first, s);
  CheckpointManifest m = FullManifest(3);
  ASSERT_TRUE(WriteCheckpoint(dir.path(), CaptureTrainingState(first.model->named_parameters(), first.optimizer.get(), m)).ok());
  first = Training{};  // the interrupted process is gone

  auto latest = LoadLatestCheckpoint(dir.path());
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  Training resumed = MakeTraining(GetParam(), /*seed=*/99);
  const auto& [path, contents] = **latest;
  ASSERT_TRUE(LoadParameters(contents, path, resumed.model->named_parameters()).ok());
  ASSERT_TRUE(LoadOptimizerState(contents, path, *resumed.optimizer).ok());
  for (int s = static_cast<int>(contents.manifest.step); s < 6; ++s) TrainStep(resumed, s);

  ExpectBitEqual(ParamData(*resumed.model), ParamData(*straight.model));
  ExpectBitEqual(resumed.optimizer->State(), straight.optimizer->State());
}

INSTANTIATE_TEST_SUITE_P(Optimizers, RoundTrip, ::testing::Values("adamw", "sgd"));

// The same on CUDA: the writer copies parameters and optimizer buffers to
// the host, the loaders copy them back onto the device.
TEST(Checkpoint, ResumeOnCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << CheckDeviceAvailable(Device::CUDA()).message();
  TempDir dir("ckpt_cuda");
  Training straight = MakeTraining("adamw", 7, Device::CUDA());
  for (int s = 0; s < 4; ++s) TrainStep(straight, s);
  Training first = MakeTraining("adamw", 7, Device::CUDA());
  for (int s = 0; s < 2; ++s) TrainStep(first, s);
  auto written = WriteCheckpoint(dir.path(),
                                 CaptureTrainingState(first.model->named_parameters(), first.optimizer.get(), FullManifest(2)));
  ASSERT_TRUE(written.ok()) << written.status();
  auto loaded = ReadCheckpoint(written->path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Training resumed = MakeTraining("adamw", 99, Device::CUDA());
  ASSERT_TRUE(LoadParameters(*loaded, written->path, resumed.model->named_parameters()).ok());
  ASSERT_TRUE(LoadOptimizerState(*loaded, written->path, *resumed.optimizer).ok());
  ExpectBitEqual(ParamData(*resumed.model), ParamData(*first.model));
  for (int s = 2; s < 4; ++s) TrainStep(resumed, s);
  ExpectBitEqual(ParamData(*resumed.model), ParamData(*straight.model));
  ExpectBitEqual(resumed.optimizer->State(), straight.optimizer->State());
}

TEST(Checkpoint, WithoutOptimizerState) {
  TempDir dir("ckpt_noopt");
  Training t = MakeTraining("sgd");
  CheckpointManifest m = FullManifest(0);
  m.optimizer.clear();
  auto written = WriteCheckpoint(dir.path(), CaptureTrainingState(t.model->named_parameters(), nullptr, m));
  ASSERT_TRUE(written.ok()) << written.status();
  // A weights-only checkpoint is refused to a caller that needs the training state ...
  auto refused = ReadCheckpoint(written->path, Need::kTrainingState);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(absl::StrCat("checkpoint ", written->path, " holds weights only")),
            absl::string_view::npos) << refused.status();
  // ... and read by one that asks for weights.
  auto loaded = ReadCheckpoint(written->path, Need::kWeights);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->manifest.weights_only());
  EXPECT_TRUE(loaded->optimizer_state.empty());
  EXPECT_EQ(loaded->manifest.optimizer, "");
  auto st = LoadOptimizerState(*loaded, written->path, *t.optimizer);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("holds no optimizer state but this run uses sgd"), absl::string_view::npos) << st;
}

TEST(Checkpoint, LargeStepsKeepOneFileNamePerStep) {
  EXPECT_EQ(CheckpointFileName(42), "ckpt-00000042.safetensors");
  EXPECT_EQ(CheckpointFileName(1234567890), "ckpt-1234567890.safetensors");
  EXPECT_EQ(ParseCheckpointFileName("ckpt-1234567890.safetensors"), 1234567890);
  EXPECT_EQ(ParseCheckpointFileName("ckpt-00000042.safetensors"), 42);
  EXPECT_EQ(ParseCheckpointFileName("ckpt-42.safetensors"), std::nullopt);
  EXPECT_EQ(ParseCheckpointFileName("ckpt-000000042.safetensors"), std::nullopt);
  EXPECT_EQ(ParseCheckpointFileName("ckpt-0000004x.safetensors"), std::nullopt);
  EXPECT_EQ(ParseCheckpointFileName("ckpt-00000042.safetensors.tmp.abc"), std::nullopt);
  EXPECT_EQ(ParseTempFileName("ckpt-00000042.safetensors.tmp.abc123"), 42);
  EXPECT_EQ(ParseTempFileName("ckpt-00000042.safetensors.tmp."), std::nullopt);
  EXPECT_EQ(ParseTempFileName("weights.safetensors.tmp.abc123"), std::nullopt);
}

// ---------------------------------------------------------------- loading into the wrong model / optimizer

class LoadMismatch : public ::testing::Test {
 protected:
  void SetUp() override {
    Training t = MakeTraining("adamw");
    TrainStep(t, 0);
    contents_ = CaptureTrainingState(t.model->named_parameters(), t.optimizer.get(), FullManifest(1));
  }
  CheckpointContents contents_;
};

TEST_F(LoadMismatch, ShapeNamesTheTensorAndBothShapes) {
  nn::ModelOptions o = SmallMlpOptions();
  o.widths = {4, 8, 8, 5};
  auto other = nn::Models().Create("mlp", o);
  ASSERT_TRUE(other.ok());
  auto st = LoadParameters(contents_, "/x/ckpt-00000001.safetensors", (*other)->named_parameters());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(st.message());
  EXPECT_NE(msg.find("/x/ckpt-00000001.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"layers.2.weight\" is [3, 8] float32 in the checkpoint but [5, 8] float32 in the model"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("\"layers.2.bias\" is [3] float32 in the checkpoint but [5] float32 in the model"),
            std::string::npos) << msg;
}

TEST_F(LoadMismatch, MissingUnexpectedAndDtypeAreNamedAndNothingIsCopied) {
  Training fresh = MakeTraining("adamw", /*seed=*/3);
  const NamedTensors before = CloneAll(ParamData(*fresh.model));
  contents_.params[0].first = "layers.9.weight";                               // missing + unexpected
  contents_.params[1].second = contents_.params[1].second.To(kFloat64);        // dtype
  auto st = LoadParameters(contents_, "F", fresh.model->named_parameters());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(st.message());
  EXPECT_NE(msg.find("parameter \"layers.0.weight\" is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected parameter \"layers.9.weight\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"layers.0.bias\" is [8] float64 in the checkpoint but [8] float32 in the model"),
            std::string::npos) << msg;
  ExpectBitEqual(ParamData(*fresh.model), before);
}

TEST_F(LoadMismatch, OptimizerKindAndStateEntries) {
  Training sgd = MakeTraining("sgd");
  auto st = LoadOptimizerState(contents_, "F", *sgd.optimizer);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("holds state of optimizer adamw but this run uses sgd"), absl::string_view::npos) << st;

  Training adamw = MakeTraining("adamw");
  contents_.optimizer_state.pop_back();
  st = LoadOptimizerState(contents_, "/d/ckpt-00000001.safetensors", *adamw.optimizer);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("checkpoint /d/ckpt-00000001.safetensors: adamw state: entry 'layers.2.bias.exp_avg_sq' is missing"),
            absl::string_view::npos) << st;
}

// ---------------------------------------------------------------- psync-sample's path

// A reader that has only the file rebuilds the model from the manifest and
// gets the trained weights.
TEST(Checkpoint, ModelRebuildsFromTheManifestAlone) {
  TempDir dir("ckpt_sample");
  Training t = MakeTraining("adamw");
  TrainStep(t, 0);
  CheckpointManifest m = FullManifest(1);
  m.model_config = EncodeModelConfig(SmallMlpOptions(/*seed=*/7));
  auto written = WriteCheckpoint(dir.path(), CaptureTrainingState(t.model->named_parameters(), t.optimizer.get(), m));
  ASSERT_TRUE(written.ok()) << written.status();

  // The file's metadata tells a checkpoint apart from other safetensors files.
  auto file = safetensors::ReadWithMetadata(written->path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE(IsCheckpoint(file->metadata));
  EXPECT_FALSE(IsCheckpoint({{"model.kind", "mlp"}}));
  EXPECT_FALSE(IsCheckpoint({{kFormatKey, "something-else"}}));
  // As psync-sample reads (weights.h): the model's record and its parameters.
  auto loaded = ReadModelWeights(written->path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto options = DecodeModelConfig(loaded->model, written->path);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->widths, SmallMlpOptions().widths);
  auto model = nn::Models().Create(loaded->model.kind, *options);
  ASSERT_TRUE(model.ok()) << model.status();
  std::map<std::string, Tensor> state(loaded->params.begin(), loaded->params.end());
  ASSERT_TRUE(nn::LoadStateDict(**model, state).ok());
  ExpectBitEqual(ParamData(**model), ParamData(*t.model));
}

TEST(ModelConfig, RoundTripsEveryField) {
  nn::ModelOptions o;
  o.seed = 18446744073709551615ull;
  o.widths = {784, 128, 10};
  o.vocab_size = 256;
  o.block_size = 64;
  o.input_shape = {1, 28, 28};
  o.num_classes = 10;
  o.flags = nn::ModelFlags({{"n-layer", "4"}, {"attention", "fused"}});
  const auto config = EncodeModelConfig(o);
  EXPECT_EQ(config.at("widths"), "784,128,10");
  EXPECT_EQ(config.at("input_shape"), "1,28,28");
  EXPECT_EQ(config.at("flag.n-layer"), "4");
  auto back = DecodeModelConfig({"gpt", config}, "F");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->seed, o.seed);
  EXPECT_EQ(back->widths, o.widths);
  EXPECT_EQ(back->vocab_size, 256);
  EXPECT_EQ(back->block_size, 64);
  EXPECT_EQ(back->input_shape, o.input_shape);
  EXPECT_EQ(back->num_classes, 10);
  EXPECT_EQ(back->flags, o.flags);
  // An empty list stays empty.
  EXPECT_TRUE(DecodeModelConfig({"mlp", EncodeModelConfig(nn::ModelOptions{})}, "F")->widths.empty());
}

// Files from psync before 0.9 wrote the GPT's and the CNN's options as
// fields of every model: they become the flags of the model the file holds.
TEST(ModelConfig, OlderFilesFieldsBecomeTheirModelsFlags) {
  const std::map<std::string, std::string> old = {{"widths", ""},         {"vocab_size", "256"}, {"block_size", "64"},
                                                  {"n_layer", "4"},       {"n_head", "2"},       {"n_embd", "32"},
                                                  {"input_shape", ""},    {"num_classes", "0"},
                                                  {"cnn_channels", "16,32"}, {"seed", "0"}};
  auto gpt = DecodeModelConfig({"gpt", old}, "F");
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  EXPECT_EQ(gpt->flags.values(),
            (std::map<std::string, std::string>{{"n-embd", "32"}, {"n-head", "2"}, {"n-layer", "4"}}));
  auto model = nn::Models().Create("gpt", *gpt);  // --attention: its default
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NE((*model)->Describe().find("L=4, H=2, C=32"), std::string::npos) << (*model)->Describe();
  auto mlp = DecodeModelConfig({"mlp", old}, "F");
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_TRUE(mlp->flags.empty()) << "the GPT's and the CNN's zeros are not the MLP's";
  auto cnn = DecodeModelConfig({"cnn", old}, "F");
  ASSERT_TRUE(cnn.ok()) << cnn.status();
  EXPECT_EQ(cnn->flags.values(), (std::map<std::string, std::string>{{"cnn-channels", "16,32"}}));
}

TEST(ModelConfig, BadValuesAndUnknownKeysNameTheFileAndKey) {
  auto st = DecodeModelConfig({"gpt", {{"block_size", "four"}}}, "/d/c.safetensors").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("checkpoint /d/c.safetensors: model configuration \"block_size\" is \"four\""),
            absl::string_view::npos) << st;
  st = DecodeModelConfig({"mlp", {{"widths", "4,,3"}}}, "F").status();
  EXPECT_NE(st.message().find("\"widths\" is \"4,,3\", expected integers"), absl::string_view::npos) << st;
  st = DecodeModelConfig({"llama", {{"n_kv_head", "2"}}}, "F").status();
  EXPECT_NE(st.message().find("\"n_kv_head\" is not a model option this psync knows"), absl::string_view::npos) << st;
}

}  // namespace
}  // namespace psync::checkpoint
