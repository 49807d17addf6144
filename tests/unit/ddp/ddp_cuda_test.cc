// DDP on CUDA with the NCCL group, world 1 on cuda:0. Compiles everywhere;
// skips itself without a GPU (or without the NCCL backend).
#include <gtest/gtest.h>

#include <atomic>

#include "tests/common/temp_dir.h"
#include "tests/unit/ddp/ddp_scenario.h"
#include "psync/comm/work.h"
#include "psync/optim/adamw.h"
#include "worker/optim/sharded_optimizer.h"
#include "psync/optim/update_rule.h"
#include "worker/ddp/reducer.h"

namespace psync::ddp::testing {
namespace {

TEST(DdpCuda, WorldOneNcclMatchesReference) {
  if (!comm::NcclBackendBuilt()) GTEST_SKIP() << "psync was built without NCCL";
  absl::Status available = CheckDeviceAvailable(Device::CUDA(0));
  if (!available.ok()) GTEST_SKIP() << available.message();
  psync::test_support::TempDir dir;
  Scenario sc;
  sc.world = 1;
  sc.micro = 2;
  sc.find_unused = true;
  sc.skip = [](int step, int micro, int) { return micro == 1 || step % 2 ? std::set<int>{1} : std::set<int>{}; };
  sc.device = Device::CUDA(0);
  sc.backend = "nccl";
  EXPECT_EQ(RunDdpRank(sc, 0, dir.path(), 1e-4f), 0);
}

// --zero on CUDA tensors (NCCL reduce-scatter and all-gather on the comm
// stream, the sharded AdamW on the device): the weights of --zero=0, bit
// for bit, at world 1 (one shard: every update and copy still runs).
std::vector<std::vector<float>> TrainZeroOnCuda(int zero, const std::string& dir) {
  auto pg = MakeGroup(dir, 0, 1, std::chrono::milliseconds(20000), "nccl");
  if (!pg) return {};
  auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CUDA(0), kSeed);
  DdpOptions opts;
  opts.bucket_caps = *BucketCaps::FromMiB(0.0005, 0.0002);
  opts.zero_stage = zero;
  auto ddp = DistributedDataParallel::Create(mlp, pg, opts);
  EXPECT_TRUE(ddp.ok()) << ddp.status();
  if (!ddp.ok()) return {};
  optim::OptimizerOptions o;
  o.weight_decay = 0.1;
  std::unique_ptr<optim::Optimizer> opt;
  if (zero == 0) {
    opt = std::make_unique<optim::AdamW>(mlp->named_parameters(), o);
  } else {
    auto sharded = optim::ShardedOptimizer::Create(mlp->named_parameters(), std::make_unique<optim::AdamWRule>(o));
    EXPECT_TRUE(sharded.ok() && (*sharded)->Attach((*ddp)->reducer().zero_buckets()).ok());
    opt = std::move(*sharded);
  }
  for (int s = 0; s < 4; ++s) {
    auto [x, y] = StepData(s, 8, Device::CUDA(0));
    auto out = (*ddp)->Forward([&] { return mlp->Forward(autograd::Variable(x), {}); });
    EXPECT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(autograd::Backward(nn::MseLoss(*out, y)).ok());
    EXPECT_TRUE(opt->ClipGradNorm(0.5).ok());
    EXPECT_TRUE(opt->Step(1e-2).ok());
    opt->ZeroGrad();
  }
  EXPECT_TRUE((*ddp)->reducer().WaitForParameters().ok());
  std::vector<std::vector<float>> w;
  for (const auto& p : mlp->parameters()) w.push_back(p.data().ToVector());
  return w;
}

TEST(DdpCuda, ZeroWorldOneNcclEqualsUnsharded) {
  if (!comm::NcclBackendBuilt()) GTEST_SKIP() << "psync was built without NCCL";
  absl::Status available = CheckDeviceAvailable(Device::CUDA(0));
  if (!available.ok()) GTEST_SKIP() << available.message();
  psync::test_support::TempDir d0, d1, d2;
  const auto ref = TrainZeroOnCuda(0, d0.path());
  ASSERT_FALSE(ref.empty());
  for (int zero : {1, 2}) {
    const auto got = TrainZeroOnCuda(zero, zero == 1 ? d1.path() : d2.path());
    ASSERT_EQ(got.size(), ref.size()) << "zero " << zero;
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(got[i], ref[i]) << "zero " << zero << " param " << i;
  }
}

TEST(DdpCuda, CudaReferenceMatchesCpuReference) {
  // The scenario's single-process reference on cuda:0 (cuBLAS, FP32 without
  // TF32, the CUDA kernels) against the same run on the CPU (OpenBLAS).
  absl::Status available = CheckDeviceAvailable(Device::CUDA(0));
  if (!available.ok()) GTEST_SKIP() << available.message();
  Scenario sc;
  sc.world = 2;
  sc.micro = 2;
  sc.steps = 6;
  sc.skip = [](int step, int micro, int) { return micro == 1 || step % 2 ? std::set<int>{1} : std::set<int>{}; };
  const auto cpu = RunReference(sc);
  sc.device = Device::CUDA(0);
  const auto gpu = RunReference(sc);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].size(), gpu[i].size());
    for (size_t j = 0; j < cpu[i].size(); ++j) EXPECT_NEAR(gpu[i][j], cpu[i][j], 1e-5f) << "param " << i << "[" << j << "]";
  }
}

// Runs everywhere (CPU tensors): a group whose collectives are "completed"
// but FAILED, as an NCCL work is once its group was aborted. The reducer
// polls IsCompleted() during backward; a bucket it saw complete must still
// have its status checked in Finalize, or backward returns OK with garbage.
class FailingWork : public comm::Work {
 public:
  absl::Status Wait(std::chrono::milliseconds) override { return absl::UnavailableError("peer died (fake)"); }
  bool IsCompleted() override { return true; }
  std::string Describe() const override { return "fake failed work"; }
};
class OkWork : public comm::Work {
 public:
  absl::Status Wait(std::chrono::milliseconds) override { return absl::OkStatus(); }
  bool IsCompleted() override { return true; }
  std::string Describe() const override { return "fake ok work"; }
};
class FailingAllreduceGroup : public comm::ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "fake"; }
  std::shared_ptr<comm::Work> AllreduceSum(Tensor, const std::string&) override {
    return std::make_shared<FailingWork>();
  }
  std::shared_ptr<comm::Work> ReduceScatterSum(Tensor, const std::string&) override {
    return std::make_shared<FailingWork>();
  }
  std::shared_ptr<comm::Work> Allgather(Tensor, const std::string&) override {
    return std::make_shared<FailingWork>();
  }
  std::shared_ptr<comm::Work> Broadcast(Tensor, int, const std::string&) override {
    return std::make_shared<OkWork>();
  }
  absl::StatusOr<std::vector<std::string>> AllgatherBytes(const std::string& b, std::chrono::milliseconds) override {
    return std::vector<std::string>{b, b};
  }
  absl::Status Barrier(std::chrono::milliseconds) override { return absl::OkStatus(); }
  void Abort(const absl::Status&) override { aborted = true; }
  std::atomic<bool> aborted{false};
};

TEST(DdpCuda, FailedBucketSeenCompleteByPollingFailsBackward) {
  auto group = std::make_shared<FailingAllreduceGroup>();
  auto mlp = std::make_shared<nn::MLP>(Widths(), Device::CPU(), kSeed);
  DdpOptions opts;
  opts.bucket_caps = *BucketCaps::FromMiB(0.0005, 0.0002);
  auto ddp = DistributedDataParallel::Create(mlp, group, opts);
  ASSERT_TRUE(ddp.ok()) << ddp.status();
  auto [x, y] = StepData(0, 4, Device::CPU());
  auto out = (*ddp)->Forward([&] { return mlp->Forward(autograd::Variable(x), {}); });
  ASSERT_TRUE(out.ok()) << out.status();
  absl::Status st = autograd::Backward(nn::MseLoss(*out, y));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(std::string(st.message()).find("peer died (fake)"), std::string::npos) << st;
  EXPECT_TRUE(group->aborted);
}

}  // namespace
}  // namespace psync::ddp::testing
