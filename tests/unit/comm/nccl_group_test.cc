// NcclGroup on cuda:0 with a world of 1. Skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#if defined(PSYNC_WITH_NCCL)
#include <cuda_runtime.h>

#include "worker/tensor/cuda/cuda_context.h"
#endif
#include "psync/tensor/ops.h"

#include "worker/comm/hash_store.h"
#include "worker/comm/process_group_factory.h"
#include "psync/tensor/device.h"

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

// Reduce-scatter and all-gather of flat buffers: in place when the length
// is a whole number of shards, through the padded copy otherwise (17, 1000
// floats at world 1: shards are rounded up to 16 floats).
TEST_F(NcclWorld1, ReduceScatterAndAllgatherInPlaceAndPadded) {
  for (int64_t n : {int64_t{1} << 20, int64_t{1000}, int64_t{17}, int64_t{0}}) {
    Tensor t = Tensor::Full({n}, 1.5f, Device::CUDA(0));
    absl::Status st = pg_->ReduceScatterSum(t, "bucket 0")->Wait(milliseconds(30000));
    ASSERT_TRUE(st.ok()) << n << ": " << st;
    st = pg_->ReduceScatterAverage(t, "bucket 0")->Wait(milliseconds(30000));
    ASSERT_TRUE(st.ok()) << n << ": " << st;
    st = pg_->Allgather(t, "params 0")->Wait(milliseconds(30000));
    ASSERT_TRUE(st.ok()) << n << ": " << st;
    for (float v : t.ToVector()) ASSERT_EQ(v, 1.5f) << n;
  }
  absl::Status bad = pg_->ReduceScatterSum(Tensor::Zeros({8}, kInt64, Device::CUDA(0)), "ints")->Wait(milliseconds(1000));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
}

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

  auto all = pg_->AllgatherBytes("hello", milliseconds(5000));
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


#if defined(PSYNC_WITH_NCCL)
// Keeps cuda:0's compute stream busy for `ms` (a host function that sleeps),
// so a collective issued now stays pending: its comm stream waits on an
// event recorded on the compute stream.
void BlockComputeStream(int ms) {
  static int delay;
  delay = ms;
  ASSERT_EQ(cudaLaunchHostFunc(
                cuda::ComputeStream(0),
                [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(delay)); }, nullptr),
            cudaSuccess);
}

TEST_F(NcclWorld1, PollingAPendingWorkLeavesNoStaleCudaError) {
  // IsCompleted/Wait poll cudaEventQuery, which may leave cudaErrorNotReady
  // as the thread's last error; kernel launches check cudaGetLastError(), so
  // an op after a "not ready" poll used to be able to throw NotReady.
  // Tensors first: a fresh cudaMalloc may wait for the device, which would
  // run the blocking host function out before the collective is issued.
  Tensor t = Tensor::Full({1 << 16}, 1.0f, Device::CUDA(0));
  Tensor a = Tensor::Full({1024}, 2.0f, Device::CUDA(0));
  ops::Synchronize(Device::CUDA(0));
  BlockComputeStream(300);
  auto w = pg_->AllreduceSum(t, "pending");
  EXPECT_FALSE(w->IsCompleted());
  EXPECT_FALSE(w->IsCompleted());
  // A kernel launch right after the polls (it used to throw NotReady).
  EXPECT_EQ(ops::Add(a, a).ToVector().back(), 4.0f);
  ASSERT_TRUE(w->Wait(milliseconds(30000)).ok());
  ops::ScaleInPlace(t, 2.0f);
  EXPECT_EQ(t.ToVector().back(), 2.0f);
}

TEST_F(NcclWorld1, AbortedPendingWorkFailsEvenAfterItsEventFires) {
  // Abort from another thread while a collective is pending. ncclCommAbort
  // lets the queued kernel finish early, so the completion event fires
  // later; Wait must still report the abort, not success.
  Tensor t = Tensor::Full({1 << 16}, 1.0f, Device::CUDA(0));
  ops::Synchronize(Device::CUDA(0));
  BlockComputeStream(300);
  auto w = pg_->AllreduceSum(t, "pending");
  std::thread aborter([&] { pg_->Abort(absl::AbortedError("test abort from another thread")); });
  aborter.join();
  // Every stream idle: the host function has run and the communication
  // stream has drained, so the collective's completion event has fired.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  absl::Status st = w->Wait(milliseconds(10000));
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  EXPECT_NE(std::string(st.message()).find("test abort from another thread"), std::string::npos) << st;
  EXPECT_TRUE(w->IsCompleted());
}

TEST_F(NcclWorld1, WorkKeepsTensorAliveAndLeavesCurrentDevice) {
  // The caller drops its handle at once: the Work's handle keeps the memory,
  // and its stream-ordered free is ordered after the collective.
  auto w = pg_->AllreduceSum(Tensor::Full({1 << 20}, 3.0f, Device::CUDA(0)), "dropped");
  ASSERT_TRUE(w->Wait(milliseconds(30000)).ok());
  w.reset();
  ops::Synchronize(Device::CUDA(0));
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
}
#endif  // PSYNC_WITH_NCCL

}  // namespace
}  // namespace psync::comm
