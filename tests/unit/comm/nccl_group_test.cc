// NcclGroup on cuda:0 with a world of 1. Skips without a GPU.
#include <gtest/gtest.h>

#include <memory>

#include "worker/comm/hash_store.h"
#include "worker/comm/process_group_factory.h"
#include "worker/tensor/device.h"

namespace psync::comm {
namespace {

using std::chrono::milliseconds;

TEST(NcclGroup, NotBuiltOrNoDeviceIsClear) {
  auto pg = CreateProcessGroup("nccl", std::make_shared<HashStore>(), 0, 1, {});
  if (pg.ok()) GTEST_SKIP() << "a CUDA device is present; covered by the tests below";
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kFailedPrecondition) << pg.status();
  const std::string msg(pg.status().message());
  EXPECT_TRUE(msg.find("no CUDA device") != std::string::npos || msg.find("without CUDA") != std::string::npos)
      << msg;
}

class NcclWorld1 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NcclBackendBuilt()) GTEST_SKIP() << "no CUDA device support: psync built without NCCL";
    absl::Status dev = CheckDeviceAvailable(Device::CUDA(0));
    if (!dev.ok()) GTEST_SKIP() << "no CUDA device: " << dev;
    GroupOptions opts;
    opts.timeout = milliseconds(30000);
    opts.device = 0;
    opts.prefix = "nccl-test";
    auto pg = CreateProcessGroup("nccl", std::make_shared<HashStore>(), 0, 1, opts);
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = std::move(*pg);
  }
  std::unique_ptr<ProcessGroup> pg_;
};

TEST_F(NcclWorld1, AllreduceAndBroadcast) {
  EXPECT_EQ(pg_->backend(), "nccl");
  Tensor t = Tensor::Full({1 << 20}, 2.5f, Device::CUDA(0));
  auto w = pg_->AllreduceSum(t, "bucket 0");
  ASSERT_TRUE(w->Wait(milliseconds(30000)).ok());
  EXPECT_TRUE(w->IsCompleted());
  auto v = t.ToVector();
  EXPECT_EQ(v.front(), 2.5f);
  EXPECT_EQ(v.back(), 2.5f);

  Tensor b = Tensor::Full({100}, 7.0f, Device::CUDA(0));
  ASSERT_TRUE(pg_->Broadcast(b, 0, "weights")->Wait(milliseconds(30000)).ok());
  EXPECT_EQ(b.ToVector()[99], 7.0f);

  auto all = pg_->Allgather("hello", milliseconds(5000));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->at(0), "hello");
  EXPECT_TRUE(pg_->Barrier(milliseconds(30000)).ok());
}

TEST_F(NcclWorld1, CpuTensorRejectedAndAbortPoisons) {
  Tensor cpu = Tensor::Full({4}, 1.0f);
  absl::Status st = pg_->AllreduceSum(cpu, "cpu bucket")->Wait(milliseconds(1000));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  pg_->Abort(absl::AbortedError("test abort"));
  st = pg_->AllreduceSum(Tensor::Full({4}, 1.0f, Device::CUDA(0)), "after abort")->Wait(milliseconds(1000));
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  EXPECT_NE(std::string(st.message()).find("test abort"), std::string::npos) << st;
}

}  // namespace
}  // namespace psync::comm
