// Shared by the checkpoint tests: a small real training setup (an MLP and a
// real optimizer trained on deterministic batches), a full manifest, file
// helpers and bit-exact tensor comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "psync/autograd/engine.h"
#include "worker/checkpoint/contents.h"
#include "worker/checkpoint/model_config.h"
#include "psync/nn/loss.h"
#include "psync/nn/models/registry.h"
#include "psync/optim/registry.h"

namespace psync::checkpoint::testing {

// Small on purpose: the atomicity tests read the file once per byte offset.
inline nn::ModelOptions SmallMlpOptions(uint64_t seed = 7, Device device = Device::CPU()) {
  nn::ModelOptions o;
  o.device = device;
  o.widths = {4, 8, 8, 3};
  o.seed = seed;
  return o;
}

struct Training {
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<optim::Optimizer> optimizer;
};

// optimizer "adamw" (weight decay on) or "sgd" (momentum and weight decay on).
inline Training MakeTraining(const std::string& optimizer, uint64_t seed = 7, Device device = Device::CPU()) {
  Training t;
  auto model = nn::Models().Create("mlp", SmallMlpOptions(seed, device));
  EXPECT_TRUE(model.ok()) << model.status();
  t.model = std::move(*model);
  optim::OptimizerOptions o;
  o.weight_decay = 0.01;
  o.momentum = optimizer == "sgd" ? 0.9 : 0;
  auto opt = optim::Optimizers().Create(optimizer, {t.model->named_parameters(), o});
  EXPECT_TRUE(opt.ok()) << opt.status();
  t.optimizer = std::move(*opt);
  return t;
}

// One optimizer step on batch `step` (a deterministic function of the step),
// on the model's device.
inline void TrainStep(Training& t, int step) {
  const Device device = t.model->named_parameters().front().second.data().device();
  std::vector<float> x(5 * 4), y(5 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7 + step * 3) % 11) / 11.0f - 0.5f;
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>((i * 5 + step) % 7) / 7.0f;
  t.optimizer->ZeroGrad();
  // Layer 1 (square) is skipped on odd steps, so optimizer step counts differ per parameter.
  std::set<int> skip;
  if (step % 2 == 1) skip.insert(1);
  autograd::Variable loss =
      nn::MseLoss(t.model->Forward(autograd::Variable(Tensor::FromVector(x, {5, 4}, device)), skip),
                  Tensor::FromVector(y, {5, 3}, device));
  ASSERT_TRUE(autograd::Backward(loss).ok());
  ASSERT_TRUE(t.optimizer->Step(0.01 * (1.0 + step)).ok());
}

// Every manifest field set, maps included.
inline CheckpointManifest FullManifest(int64_t step) {
  CheckpointManifest m;
  m.step = step;
  m.model = "mlp";
  m.model_config = EncodeModelConfig(SmallMlpOptions());
  m.optimizer = "adamw";
  m.data_position = {{"epoch", 2}, {"cursor", 1234567890123}, {"shuffle_seed", -5}};
  m.rng = {{"data", {0, 1, 18446744073709551615ull}}, {"dropout", {}}};
  m.world_size = 2;
  m.bucket_plan = R"({"buckets":[[0,1],[2,3,4,5]]})";
  return m;
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Replaces the file by a new one (unlink, create) rather than truncating it:
// ext4 flushes a file truncated and rewritten at close (auto_da_alloc), which
// made the every-offset tests 5x slower.
inline void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::remove(path.c_str());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Same names, shapes, dtypes and bytes, in the same order.
inline void ExpectBitEqual(const NamedTensors& got, const NamedTensors& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].first);
    EXPECT_EQ(got[i].first, want[i].first);
    const Tensor a = got[i].second.To(Device::CPU()).Contiguous();
    const Tensor b = want[i].second.To(Device::CPU()).Contiguous();
    ASSERT_EQ(a.shape(), b.shape());
    ASSERT_EQ(a.dtype(), b.dtype());
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << "bytes differ";
  }
}

// Deep copies (a snapshot that later steps do not change).
inline NamedTensors CloneAll(const NamedTensors& tensors) {
  NamedTensors out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.Clone());
  return out;
}

inline NamedTensors ParamData(const nn::Module& m) {
  NamedTensors out;
  for (const auto& [name, p] : m.named_parameters()) out.emplace_back(name, p.data());
  return out;
}

}  // namespace psync::checkpoint::testing
