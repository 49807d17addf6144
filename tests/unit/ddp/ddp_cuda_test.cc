// DDP on CUDA with the NCCL group, world 1 on cuda:0. Compiles everywhere;
// skips itself without a GPU (or without the NCCL backend).
#include <gtest/gtest.h>

#include "tests/common/temp_dir.h"
#include "tests/unit/ddp/ddp_scenario.h"

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

}  // namespace
}  // namespace psync::ddp::testing
