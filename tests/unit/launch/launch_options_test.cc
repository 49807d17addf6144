// psync-launch's checks before anything starts (exit 2 with these messages),
// its temp folder and its binary search.
#include "client/launch/launch_options.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "client/launch/find_binary.h"
#include "client/launch/launch_dir.h"

namespace psync::launch {
namespace {

LaunchOptions Valid() {
  LaunchOptions o;
  o.nproc = 2;
  o.worker_flags = {"--steps=10", "--ranks-file=x"};
  return o;
}

std::string Refusal(const LaunchOptions& o) {
  absl::Status st = CheckLaunchOptions(o);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  return std::string(st.message());
}

TEST(LaunchOptions, ValidOptionsPass) {
  EXPECT_TRUE(CheckLaunchOptions(Valid()).ok());
  LaunchOptions o = Valid();
  EXPECT_TRUE(o.UseRelay());
  o.nproc = 1;
  EXPECT_FALSE(o.UseRelay()) << "one rank has one stream either way";
  o.nproc = 4;
  o.relay = false;
  EXPECT_FALSE(o.UseRelay());
}

TEST(LaunchOptions, EachBadFlagIsNamed) {
  LaunchOptions o = Valid();
  o.nproc = 0;
  EXPECT_EQ(Refusal(o), "--nproc: must be a positive number of workers (got 0)");
  o = Valid();
  o.max_restarts = -1;
  EXPECT_EQ(Refusal(o), "--max-restarts: must be >= 0 (got -1)");
  o = Valid();
  o.coordinator_args = {"--liveness=1s", "--max_restarts=3"};
  EXPECT_EQ(Refusal(o),
            "--coordinator-args: pass --max-restarts to psync-launch itself (it sets the coordinator's and restarts "
            "the workers)");
  o = Valid();
  o.port = 65536;
  EXPECT_EQ(Refusal(o), "--port: 65536 is not a port (0 = pick a free one)");
  o = Valid();
  o.tls_ca = "/no/such/ca.pem";
  EXPECT_EQ(Refusal(o), "--tls-ca: cannot read '/no/such/ca.pem': No such file or directory");
}

TEST(LaunchOptions, WorkerFlagsTheLauncherSetsAreRefused) {
  for (const char* f : {"--rank=3", "--world_size=2", "--coordinator", "--local-rank=0", "--job-id=x", "--token=t",
                        "--tls_ca=ca.pem"}) {
    LaunchOptions o = Valid();
    o.worker_flags.push_back(f);
    const std::string name = std::string(f).substr(0, std::string(f).find('='));
    EXPECT_EQ(Refusal(o), "worker flag " + name + " is set by the launcher; use psync-launch's own flags") << f;
  }
  LaunchOptions o = Valid();
  o.worker_flags = {"--ranked", "--coordinator-timeout=5s"};
  EXPECT_TRUE(CheckLaunchOptions(o).ok()) << "only the flag itself, not a longer name";
}

TEST(LaunchDir, HoldsTheTokenPrivatelyAndIsRemoved) {
  std::string path;
  {
    LaunchDir dir;
    ASSERT_TRUE(dir.Create().ok());
    path = dir.path();
    EXPECT_EQ(path.rfind("/tmp/psync-launch-", 0), 0u) << path;
    absl::StatusOr<std::string> token = dir.MakeToken();
    ASSERT_TRUE(token.ok()) << token.status();
    EXPECT_EQ(token->size(), 64u);
    EXPECT_EQ(token->find_first_not_of("0123456789abcdef"), std::string::npos) << *token;
    std::ifstream f(dir.token_file());
    std::string written;
    f >> written;
    EXPECT_EQ(written, *token);
    struct stat st;
    ASSERT_EQ(stat(dir.token_file().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_FALSE(dir.MakeToken().ok()) << "a token file is never overwritten";
    std::ofstream(dir.port_file()) << "1234\n";
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "removed with its files at the end";
}

TEST(FindBinary, AGivenPathMustBeExecutableAndAMissingOneNamesTheFlag) {
  absl::StatusOr<std::string> sh = FindBinary("/bin/sh", "psync-worker", {}, "worker-bin");
  ASSERT_TRUE(sh.ok()) << sh.status();
  EXPECT_EQ(*sh, "/bin/sh");
  absl::StatusOr<std::string> bad = FindBinary("/tmp", "psync-worker", {}, "worker-bin");
  EXPECT_EQ(bad.status().message(), "--worker-bin: /tmp is not an executable") << "a folder";
  absl::StatusOr<std::string> none = FindBinary("", "psync-no-such-binary", {"server"}, "coordinator-bin");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(),
            "cannot find psync-no-such-binary next to psync-launch or on PATH (use --coordinator-bin)");
  absl::StatusOr<std::string> on_path = FindBinary("", "sh", {}, "x");
  ASSERT_TRUE(on_path.ok()) << on_path.status();
  EXPECT_EQ(access(on_path->c_str(), X_OK), 0) << *on_path;
}

}  // namespace
}  // namespace psync::launch
