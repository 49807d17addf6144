// --init (worker/runtime/init_weights.h): weights load in the model's
// registration order whatever the file's order, and every mismatch is an
// InvalidArgument naming the file, the tensor and the expected shape. The
// file may be a plain state dict, a --save file (a weights-only checkpoint),
// a training checkpoint, or a --save file of an older psync.
#include "worker/runtime/init_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"
#include "worker/checkpoint/model_config.h"
#include "worker/checkpoint/training_state.h"
#include "worker/checkpoint/writer.h"
#include "worker/nn/models/mlp.h"
#include "psync/nn/state_dict.h"
#include "psync/optim/registry.h"
#include "worker/safetensors/safetensors.h"
#include "psync/tensor/ops.h"

namespace psync::runtime {
namespace {

using test_support::TempDir;

std::vector<float> Iota(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<float>(i);
  return v;
}

Tensor T(const std::vector<float>& v, const Shape& shape) { return Tensor::FromVector(v, shape); }

class InitFiles : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const NamedTensors& tensors) {
    const std::string path = dir_.File(name);
    absl::Status st = safetensors::Write(path, tensors);
    EXPECT_TRUE(st.ok()) << st;
    return path;
  }
  void ExpectInitError(const std::string& path, const std::vector<std::string>& needles) {
    absl::StatusOr<NamedTensors> t = ReadInitialWeights(path, mlp_);
    ASSERT_FALSE(t.ok()) << path;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
    const std::string msg(t.status().message());
    EXPECT_NE(msg.find("--init " + path), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }

  TempDir dir_{"psync_runtime_init"};
  nn::MLP mlp_{{3, 2, 1}};
};

TEST_F(InitFiles, LoadsInRegistrationOrderAndCopiesIntoTheModel) {
  // Written in a different order than the MLP registers its parameters.
  const std::string path = Write("init.safetensors", {{"layers.1.bias", T({9}, {1})},
                                                      {"layers.0.weight", T(Iota(6, 0), {2, 3})},
                                                      {"layers.1.weight", T({7, 8}, {1, 2})},
                                                      {"layers.0.bias", T({-1, -2}, {2})}});
  absl::StatusOr<NamedTensors> init = ReadInitialWeights(path, mlp_);
  ASSERT_TRUE(init.ok()) << init.status();
  ASSERT_EQ(init->size(), 4u);
  EXPECT_EQ((*init)[0].first, "layers.0.weight");
  EXPECT_EQ((*init)[0].second.ToVector(), Iota(6, 0));
  EXPECT_EQ((*init)[1].first, "layers.0.bias");
  EXPECT_EQ((*init)[2].first, "layers.1.weight");
  EXPECT_EQ((*init)[3].first, "layers.1.bias");

  ASSERT_TRUE(LoadInitialWeights(path, mlp_).ok());
  const auto params = mlp_.named_parameters();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0].second.data().ToVector(), Iota(6, 0));
  EXPECT_EQ(params[1].second.data().ToVector(), (std::vector<float>{-1, -2}));
  EXPECT_EQ(params[2].second.data().ToVector(), (std::vector<float>{7, 8}));
  EXPECT_EQ(params[3].second.data().ToVector(), (std::vector<float>{9}));
}

TEST_F(InitFiles, ErrorsNameFileTensorAndShape) {
  const NamedTensors good = {{"layers.0.weight", T(Iota(6, 0), {2, 3})},
                             {"layers.0.bias", T({0, 0}, {2})},
                             {"layers.1.weight", T({0, 0}, {1, 2})},
                             {"layers.1.bias", T({0}, {1})}};
  NamedTensors shape = good;
  shape[0].second = T(Iota(6, 0), {3, 2});
  ExpectInitError(Write("shape.safetensors", shape), {"'layers.0.weight'", "[3, 2]", "[2, 3]"});
  NamedTensors missing(good.begin(), good.end() - 1);
  ExpectInitError(Write("missing.safetensors", missing), {"missing tensor 'layers.1.bias'"});
  NamedTensors extra = good;
  extra.emplace_back("layers.2.weight", T({0}, {1, 1}));
  ExpectInitError(Write("extra.safetensors", extra), {"unexpected tensor 'layers.2.weight'"});
  NamedTensors nan = good;
  nan[2].second = T({0, std::nanf("")}, {1, 2});
  ExpectInitError(Write("nan.safetensors", nan), {"'layers.1.weight'", "non-finite"});
}

// The files psync-worker writes: a --save file (weights only) and a training
// checkpoint (its optimizer state is not needed and not looked at), and an
// older --save file (plain safetensors with the model's metadata).
TEST_F(InitFiles, LoadsTheFilesPsyncWorkerWrites) {
  nn::MLP trained({3, 2, 1});
  std::vector<float> expected;  // every parameter value, in registration order
  for (const auto& [name, p] : trained.named_parameters()) {
    const std::vector<float> v = Iota(p.data().numel(), static_cast<float>(expected.size()) + 0.5f);
    ops::Copy(p.mutable_data(), T(v, p.shape()));
    expected.insert(expected.end(), v.begin(), v.end());
  }
  checkpoint::CheckpointManifest m;
  m.step = 5;
  m.model = "mlp";
  m.world_size = 1;
  const std::string save = dir_.File("final.safetensors");
  ASSERT_TRUE(checkpoint::WriteCheckpointFile(save, checkpoint::CaptureTrainingState(trained.named_parameters(), nullptr, m)).ok());
  optim::OptimizerOptions oo;
  auto adamw = optim::Optimizers().Create("adamw", {trained.named_parameters(), oo});
  ASSERT_TRUE(adamw.ok()) << adamw.status();
  auto ckpt = checkpoint::WriteCheckpoint(dir_.File("ckpt"),
                                          checkpoint::CaptureTrainingState(trained.named_parameters(), adamw->get(), m));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::map<std::string, std::string> old_md = {{"model", "mlp"}, {"model.widths", "3,2,1"}, {"steps_completed", "5"}};
  const std::string old = dir_.File("old.safetensors");
  ASSERT_TRUE(safetensors::Write(old, nn::StateDict(trained), old_md).ok());

  for (const std::string& path : {save, ckpt->path, old}) {
    SCOPED_TRACE(path);
    nn::MLP fresh({3, 2, 1});
    ASSERT_TRUE(LoadInitialWeights(path, fresh).ok()) << LoadInitialWeights(path, fresh);
    std::vector<float> got;
    for (const auto& [name, p] : fresh.named_parameters()) {
      for (float x : p.data().ToVector()) got.push_back(x);
    }
    EXPECT_EQ(got, expected);
  }
}

TEST_F(InitFiles, ADamagedCheckpointNamesTheFlagAndTheFile) {
  checkpoint::CheckpointManifest m;
  m.model = "mlp";
  m.world_size = 1;
  const std::string path = dir_.File("final.safetensors");
  ASSERT_TRUE(checkpoint::WriteCheckpointFile(path, checkpoint::CaptureTrainingState(mlp_.named_parameters(), nullptr, m)).ok());
  {  // flip a bit of the last parameter's last byte
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char last = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(last ^ 0x01));
  }
  absl::StatusOr<NamedTensors> t = ReadInitialWeights(path, mlp_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << t.status();
  EXPECT_NE(t.status().message().find("--init: checkpoint " + path), absl::string_view::npos) << t.status();
}

TEST_F(InitFiles, UnreadableFileNamesTheFlagAndTheFile) {
  const std::string path = dir_.File("does_not_exist.safetensors");
  absl::StatusOr<NamedTensors> t = ReadInitialWeights(path, mlp_);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--init"), absl::string_view::npos) << t.status();
  EXPECT_NE(t.status().message().find("does_not_exist.safetensors"), absl::string_view::npos) << t.status();
}

}  // namespace
}  // namespace psync::runtime
