#include "worker/control/host_identity.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace psync::control {
namespace {

TEST(HostIdentity, EnvironmentWinsAndIsValidated) {
  auto id = MakeHostId("rack3-node7", "vm", "b", "1");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, "rack3-node7");
  auto space = MakeHostId("has space", "vm", "", "");
  EXPECT_EQ(space.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(space.status().message()).find("PSYNC_HOST_ID has byte 0x20 at offset 3"), std::string::npos)
      << space.status();
  EXPECT_EQ(MakeHostId("", "vm", "", "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeHostId(std::string(257, 'x').c_str(), "vm", "", "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostIdentity, HostnameBootIdAndMountNamespace) {
  auto id = MakeHostId(nullptr, "node1", "0f6c-42\n", "4026531840");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, "node1/0f6c-42/mnt:4026531840");
  // Two containers on one machine: same hostname and boot, other namespace.
  EXPECT_NE(*id, *MakeHostId(nullptr, "node1", "0f6c-42", "4026532000"));
  EXPECT_EQ(*MakeHostId(nullptr, "", "", ""), "unknown-host");
}

TEST(HostIdentity, LocalIdIsStableAndPrintable) {
  unsetenv("PSYNC_HOST_ID");
  auto a = LocalHostId();
  auto b = LocalHostId();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(a->find("/mnt:"), std::string::npos) << *a;
  for (char c : *a) EXPECT_TRUE(c > 0x20 && c < 0x7f) << *a;
  setenv("PSYNC_HOST_ID", "from-env", 1);
  EXPECT_EQ(*LocalHostId(), "from-env");
  unsetenv("PSYNC_HOST_ID");
}

}  // namespace
}  // namespace psync::control
