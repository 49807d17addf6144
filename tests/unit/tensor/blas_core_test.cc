// The choice of OpenBLAS kernels from CPU features (worker/tensor/cpu/blas_core.h).
#include "worker/tensor/cpu/blas_core.h"

#include <gtest/gtest.h>

namespace psync::ops {
namespace {

const CpuFeatures kAvx512{true, true, true};

TEST(BlasCore, GenericFallbackOnAModernCpuGetsItsKernels) {
  EXPECT_EQ(BetterOpenBlasCore("Prescott", kAvx512), "SkylakeX");
  EXPECT_EQ(BetterOpenBlasCore("Core2", {true, true, false}), "Haswell");
  EXPECT_EQ(BetterOpenBlasCore("Nehalem", {true, false, false}), "Sandybridge");
  EXPECT_EQ(BetterOpenBlasCore("Sandybridge", {true, true, false}), "Haswell");
  EXPECT_EQ(BetterOpenBlasCore("haswell", kAvx512), "SkylakeX") << "names compare case-insensitively";
}

TEST(BlasCore, AsGoodOrUnknownIsLeftAlone) {
  EXPECT_EQ(BetterOpenBlasCore("SkylakeX", kAvx512), std::nullopt) << "same level: no re-exec";
  EXPECT_EQ(BetterOpenBlasCore("Zen", {true, true, false}), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Sapphirerapids", kAvx512), std::nullopt);
  EXPECT_EQ(BetterOpenBlasCore("Haswell", {true, false, false}), std::nullopt) << "never downgrade";
  EXPECT_EQ(BetterOpenBlasCore("Prescott", {}), std::nullopt) << "an SSE-only CPU";
  EXPECT_EQ(BetterOpenBlasCore("NEOVERSEN1", kAvx512), std::nullopt) << "unknown name";
  EXPECT_EQ(BetterOpenBlasCore("", kAvx512), std::nullopt);
}

TEST(BlasCore, HostFeaturesAndCoreAreConsistent) {
  const CpuFeatures f = HostCpuFeatures();
  EXPECT_TRUE(!f.avx512 || f.avx2_fma);
  EXPECT_TRUE(!f.avx2_fma || f.avx);
  EXPECT_FALSE(OpenBlasCoreName().empty()) << "openblas_get_corename() names the loaded kernels";
}

}  // namespace
}  // namespace psync::ops
