// The fused causal attention on CUDA against the CPU kernels (the reference):
// float32 (SIMT kernels), bfloat16 on tensor cores (D = 16, 32, 64) and
// bfloat16 on the SIMT kernels (other D), odd T and T off the 64-row tile,
// q/k/v as strided views of one qkv projection, the log-sum-exp, a
// GPT-2-small-shaped head, and a backward with the same bits on every run.
// Skips without a GPU; written so that a GPU session only has to run it.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/tensor/attention_test_util.h"
#include "psync/tensor/ops.h"

namespace psync {
namespace {

using ::psync::testing::MaterializedAttention;
using ::psync::testing::Qkv;
using ::psync::testing::RandomQkv;
using ::psync::testing::RandomTensor;
using ::psync::testing::RelDiff;
using ::psync::testing::SameBits;

class AttentionCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device: " << CheckDeviceAvailable(Device::CUDA(0)).message();
    }
  }
  const Device gpu_ = Device::CUDA(0);

  static Qkv OnDevice(const Qkv& x, Device d) { return testing::To(x, d); }

  // CUDA vs CPU, forward (out, lse) and backward, for one case.
  void Compare(int64_t B, int64_t H, int64_t T, int64_t D, DType dt, bool projection, double tol) {
    const std::string what = "B=" + std::to_string(B) + " H=" + std::to_string(H) + " T=" + std::to_string(T) +
                             " D=" + std::to_string(D) + " " + DTypeName(dt) + (projection ? " qkv views" : "");
    const Qkv host = testing::To(RandomQkv(B, H, T, D, 100 + static_cast<uint32_t>(T + D), projection,
                                           Device::CPU(), -2.0f, 2.0f),
                                 dt);
    const Qkv dev = OnDevice(host, gpu_);
    ASSERT_EQ(dev.q.strides(), host.q.strides()) << what;
    const Tensor g = RandomTensor({B, H, T, D}, 7).To(dt);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const ops::AttentionResult rc = ops::CausalAttention(host.q, host.k, host.v, scale);
    const ops::AttentionResult rg = ops::CausalAttention(dev.q, dev.k, dev.v, scale);
    ASSERT_TRUE(rg.out.device().is_cuda()) << what;
    EXPECT_LE(RelDiff(rg.out, rc.out), tol) << what << " out";
    EXPECT_LE(RelDiff(rg.lse, rc.lse), tol) << what << " lse";
    const ops::AttentionGrads gc = ops::CausalAttentionBackward(g, host.q, host.k, host.v, rc.out, rc.lse, scale);
    const ops::AttentionGrads gg =
        ops::CausalAttentionBackward(g.To(gpu_), dev.q, dev.k, dev.v, rg.out, rg.lse, scale);
    EXPECT_LE(RelDiff(gg.dq, gc.dq), 2 * tol) << what << " dq";
    EXPECT_LE(RelDiff(gg.dk, gc.dk), 2 * tol) << what << " dk";
    EXPECT_LE(RelDiff(gg.dv, gc.dv), 2 * tol) << what << " dv";
  }
};

TEST_F(AttentionCuda, Float32MatchesTheCpu) {
  for (int64_t T : {1, 7, 31, 32, 33, 64, 65, 100, 129, 200}) {
    for (int64_t D : {1, 5, 8, 32, 64, 100, 128}) {
      for (bool projection : {false, true}) Compare(2, 3, T, D, kFloat32, projection, 1e-5);
    }
  }
  Compare(1, 2, 70, 256, kFloat32, true, 1e-5);  // the largest D (shared memory above 48 KiB)
}

TEST_F(AttentionCuda, BFloat16TensorCoresMatchTheCpu) {
  for (int64_t T : {1, 7, 63, 64, 65, 127, 128, 130, 257}) {
    for (int64_t D : {16, 32, 64}) {
      for (bool projection : {false, true}) Compare(2, 2, T, D, kBFloat16, projection, 2e-2);
    }
  }
}

TEST_F(AttentionCuda, BFloat16SimtMatchesTheCpu) {
  for (int64_t T : {1, 33, 65, 130}) {
    for (int64_t D : {8, 24, 48, 96}) Compare(1, 2, T, D, kBFloat16, true, 2e-2);
  }
}

TEST_F(AttentionCuda, Gpt2SmallHeadShape) {
  // One layer of GPT-2 small at batch 1: T = 1024, H = 12, D = 64, as views
  // of the qkv projection, against the CPU in bf16 and fp32.
  Compare(1, 12, 1024, 64, kBFloat16, true, 2e-2);
  Compare(1, 12, 1024, 64, kFloat32, true, 1e-5);
}

TEST_F(AttentionCuda, BFloat16AgainstTheMaterializedFloat32Path) {
  // The whole chain the issue asks for: bf16 CUDA (tensor cores) against the
  // fp32 materialized reference on the same rounded inputs: 2e-2 relative.
  const Qkv xb = testing::To(RandomQkv(2, 4, 150, 64, 5, true), kBFloat16);
  const Qkv xf = testing::To(xb, kFloat32);
  const double scale = 0.125;
  const ops::AttentionResult r = ops::CausalAttention(xb.q.To(gpu_), xb.k.To(gpu_), xb.v.To(gpu_), scale);
  EXPECT_LE(RelDiff(r.out, MaterializedAttention(xf, scale)), 2e-2);
}

TEST_F(AttentionCuda, BackwardHasTheSameBitsEveryRun) {
  for (const auto& [D, dt] : std::vector<std::pair<int64_t, DType>>{{64, kBFloat16}, {48, kBFloat16}, {64, kFloat32}}) {
    const Qkv x = OnDevice(testing::To(RandomQkv(2, 3, 300, D, 9, true), dt), gpu_);
    const Tensor g = RandomTensor({2, 3, 300, D}, 10, gpu_).To(dt);
    const ops::AttentionResult r1 = ops::CausalAttention(x.q, x.k, x.v, 0.1);
    const ops::AttentionResult r2 = ops::CausalAttention(x.q, x.k, x.v, 0.1);
    EXPECT_TRUE(SameBits(r1.out, r2.out) && SameBits(r1.lse, r2.lse)) << D << " " << DTypeName(dt);
    const ops::AttentionGrads a = ops::CausalAttentionBackward(g, x.q, x.k, x.v, r1.out, r1.lse, 0.1);
    const ops::AttentionGrads b = ops::CausalAttentionBackward(g, x.q, x.k, x.v, r1.out, r1.lse, 0.1);
    EXPECT_TRUE(SameBits(a.dq, b.dq)) << D << " " << DTypeName(dt);
    EXPECT_TRUE(SameBits(a.dk, b.dk)) << D << " " << DTypeName(dt);
    EXPECT_TRUE(SameBits(a.dv, b.dv)) << D << " " << DTypeName(dt);
  }
}

TEST_F(AttentionCuda, TooLargeAHeadIsANamedError) {
  const Tensor x = Tensor::Zeros({1, 1, 4, 300}, gpu_);
  testing::ExpectTensorError([&] { ops::CausalAttention(x, x, x, 1.0); }, {"CausalAttention", "D=300"});
}

}  // namespace
}  // namespace psync
