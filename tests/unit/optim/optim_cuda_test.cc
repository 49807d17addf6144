// The fused optimizer kernels and SumOfSquares on CUDA against the CPU:
// the same rounding by construction, so the results must be bitwise equal.
// Skips without a GPU (the build machine has none); it must still compile
// and link everywhere.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/unit/optim/optim_test_util.h"
#include "psync/optim/registry.h"

namespace psync::optim {
namespace {

using testing::Compare;
using testing::RunConfig;

class OptimCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device: " << CheckDeviceAvailable(Device::CUDA(0)).message();
    }
  }

  // The same run on CPU and on CUDA; every parameter and state entry equal.
  static void ExpectSameRun(const std::string& name, const OptimizerOptions& o, const RunConfig& c) {
    NamedTensors result[2];
    const Device devices[2] = {Device::CPU(), Device::CUDA(0)};
    for (int d = 0; d < 2; ++d) {
      absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizers().Create(name, {testing::MakeParams(devices[d]), o});
      ASSERT_TRUE(opt.ok()) << opt.status();
      testing::Train(**opt, c, 0, c.steps, devices[d]);
      result[d] = testing::Snapshot(**opt);
    }
    ASSERT_EQ(result[0].size(), result[1].size());
    for (size_t i = 0; i < result[0].size(); ++i) {
      const testing::Diff diff = Compare(result[0][i].second, result[1][i].second);
      EXPECT_EQ(diff.bits_differ, 0) << result[0][i].first << ": max |cpu - cuda| " << diff.max_abs;
    }
  }
};

TEST_F(OptimCuda, AdamWMatchesCpuBitwise) {
  OptimizerOptions o;
  o.weight_decay = 0.1;
  RunConfig c;
  c.steps = 12;
  c.schedule = "cosine";
  c.warmup = 2;
  ExpectSameRun("adamw", o, c);
}

TEST_F(OptimCuda, AdamWWithClippingMatchesCpuBitwise) {
  OptimizerOptions o;
  o.weight_decay = 0.1;
  RunConfig c;
  c.steps = 8;
  c.clip = 1.0;
  ExpectSameRun("adamw", o, c);
}

TEST_F(OptimCuda, SgdMatchesCpuBitwise) {
  OptimizerOptions o;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  RunConfig c;
  c.steps = 6;
  c.lr = 0.05;
  ExpectSameRun("sgd", o, c);
  ExpectSameRun("sgd", OptimizerOptions{}, c);
}

TEST_F(OptimCuda, SumOfSquaresMatchesCpuBitwise) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{16384}, int64_t{1} << 20, (int64_t{1} << 22) + 77}) {
    const Tensor x = Tensor::FromVector(testing::Uniform(n, static_cast<uint32_t>(n), 3.0f), {n});
    const double cpu = ops::SumOfSquares(x).Item<double>();
    const double cuda = ops::SumOfSquares(x.To(Device::CUDA(0))).Item<double>();
    EXPECT_EQ(cpu, cuda) << "n=" << n;
  }
}

}  // namespace
}  // namespace psync::optim
