// psync-launch as one node of a job across nodes: the environment fallbacks
// (torchrun's and Kubeflow's names), the node's ranks and host id, the
// token file, and the refusals (exit 2) that name their flag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "client/launch/child_commands.h"
#include "client/launch/launch_options.h"

namespace psync::launch {
namespace {

using Given = std::set<std::string>;

LaunchOptions Node(int nnodes, int node_rank) {
  LaunchOptions o;
  o.nproc = 2;
  o.nnodes = nnodes;
  o.node_rank = node_rank;
  o.coordinator = "10.0.0.1:29500";
  o.token = "t";
  return o;
}

LaunchEnvironment Env() {
  LaunchEnvironment e;
  e.hostname = "gpu7";
  return e;
}

std::string Refusal(const LaunchOptions& o) {
  absl::Status st = CheckLaunchOptions(o);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  return std::string(st.message());
}

TEST(NodeOptions, TheTorchrunEnvironmentFillsInWhatTheFlagsDidNotGive) {
  LaunchEnvironment env = Env();
  env.nnodes = "2";
  env.node_rank = "1";
  env.master_addr = "psync-0.psync";
  env.token = "from-env";
  LaunchOptions o;
  o.nproc = 4;
  ASSERT_TRUE(ApplyEnvironment(env, {}, &o).ok());
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.coordinator, "psync-0.psync:29500") << "torchrun's default MASTER_PORT";
  EXPECT_EQ(o.token, "from-env");
  EXPECT_TRUE(o.NodeMode());
  EXPECT_FALSE(o.StartsCoordinator());
  EXPECT_EQ(o.WorldSize(), 8);
  EXPECT_EQ(o.FirstRank(), 4);
  EXPECT_EQ(o.host_id, "gpu7/node1") << "one host per node";
  env.master_port = "29611";
  o = LaunchOptions{};
  ASSERT_TRUE(ApplyEnvironment(env, {}, &o).ok());
  EXPECT_EQ(o.coordinator, "psync-0.psync:29611");
  EXPECT_EQ(o.port, 29611);
  EXPECT_EQ(o.host, "psync-0.psync") << "bound where it is reached, unless --host says otherwise";
}

TEST(NodeOptions, FlagsWinOverTheEnvironment) {
  LaunchEnvironment env = Env();
  env.nnodes = "4";
  env.node_rank = "3";
  env.master_addr = "elsewhere";
  env.token = "from-env";
  env.host_id = "rack2-a";
  LaunchOptions o = Node(2, 0);
  o.host = "0.0.0.0";
  o.start_coordinator = true;
  ASSERT_TRUE(ApplyEnvironment(env, {"nnodes", "node_rank", "coordinator", "token", "host"}, &o).ok());
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.coordinator, "10.0.0.1:29500");
  EXPECT_EQ(o.token, "t");
  EXPECT_EQ(o.host, "0.0.0.0");
  EXPECT_EQ(o.port, 29500);
  EXPECT_TRUE(o.StartsCoordinator());
  EXPECT_EQ(o.host_id, "rack2-a/node0") << "PSYNC_HOST_ID is the base when set";
  LaunchOptions from_file = Node(2, 0);
  from_file.token = "";
  ASSERT_TRUE(ApplyEnvironment(env, {"token_file"}, &from_file).ok());
  EXPECT_EQ(from_file.token, "") << "--token-file (read by main) is not overridden by PSYNC_TOKEN";
}

TEST(NodeOptions, OneHostAloneIgnoresMasterAddr) {
  LaunchEnvironment env = Env();
  env.master_addr = "10.9.9.9";
  env.master_port = "1";
  LaunchOptions o;
  o.nproc = 2;
  ASSERT_TRUE(ApplyEnvironment(env, {}, &o).ok());
  EXPECT_FALSE(o.NodeMode()) << "a stray MASTER_ADDR never sends a one-host job elsewhere";
  EXPECT_TRUE(o.StartsCoordinator());
  EXPECT_EQ(o.host, "127.0.0.1");
  EXPECT_EQ(o.host_id, "");
  EXPECT_EQ(NodeSlot(o, 1).rank, 1);
  EXPECT_EQ(NodeSlot(o, 1).world_size, 2);
}

TEST(NodeOptions, BadEnvironmentAndAddressesAreNamed) {
  LaunchEnvironment env = Env();
  env.nnodes = "two";
  LaunchOptions o;
  EXPECT_EQ(ApplyEnvironment(env, {}, &o).message(), "NNODES='two' is not a number");
  env = Env();
  env.nnodes = "2";
  env.master_addr = "h";
  env.master_port = "x";
  EXPECT_EQ(ApplyEnvironment(env, {}, &o).message(), "MASTER_PORT='x' is not a number");
  o = Node(2, 0);
  o.coordinator = "nohost";
  EXPECT_EQ(ApplyEnvironment(Env(), {"coordinator"}, &o).message(),
            "--coordinator: 'nohost' is not HOST:PORT (port 1..65535)");
  o = Node(2, 0);
  o.coordinator = "h:70000";
  EXPECT_FALSE(ApplyEnvironment(Env(), {"coordinator"}, &o).ok());
  o = Node(2, 0);
  EXPECT_EQ(ApplyEnvironment(Env(), {"coordinator", "port"}, &o).message(),
            "--port: with --coordinator the coordinator's port is the one it names");
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort("[::1]:29500", "--coordinator", &host, &port).ok());
  EXPECT_EQ(host, "[::1]");
  EXPECT_EQ(port, 29500);
  EXPECT_FALSE(SplitHostPort("[::1]", "--coordinator", &host, &port).ok());
}

TEST(NodeOptions, EachBadNodeFlagIsNamed) {
  EXPECT_TRUE(CheckLaunchOptions(Node(2, 1)).ok());
  LaunchOptions o = Node(0, 0);
  EXPECT_EQ(Refusal(o), "--nnodes: must be >= 1 (got 0)");
  o = Node(2, 2);
  EXPECT_EQ(Refusal(o), "--node-rank: 2 is not a node of --nnodes=2 (0..1)");
  o = Node(2, 0);
  o.coordinator = "";
  EXPECT_EQ(Refusal(o),
            "--nnodes=2: every node needs the job's coordinator: pass --coordinator=HOST:PORT (or set MASTER_ADDR "
            "and MASTER_PORT) on each node, and --start-coordinator to start it on node 0");
  o = Node(1, 0);
  o.coordinator = "";
  o.start_coordinator = true;
  EXPECT_EQ(Refusal(o), "--start-coordinator: needs --coordinator=HOST:PORT, the address to start it at");
  o = Node(2, 0);
  o.token = "";
  EXPECT_EQ(Refusal(o),
            "--coordinator: a job whose coordinator is named needs the job's token on every node: set PSYNC_TOKEN "
            "or pass --token-file=FILE (the same on each node)");
  o = Node(2, 0);
  o.join_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(Refusal(o), "--join-timeout: must be positive");
  o = Node(2, 0);
  o.min_nodes = 3;
  EXPECT_EQ(Refusal(o), "--min-nodes: must be in 1..--nnodes (2), got 3");
  o.min_nodes = 1;
  EXPECT_EQ(Refusal(o),
            "--min-nodes=1: an elastic job goes on without a lost node as its next generation, which needs "
            "--max-restarts=N (N >= 1)");
  o.max_restarts = 1;
  EXPECT_TRUE(CheckLaunchOptions(o).ok());
  EXPECT_TRUE(o.Elastic());
  o.rejoin_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(Refusal(o), "--rejoin-timeout: must be positive");
  o = Node(2, 0);
  o.min_nodes = 2;
  EXPECT_TRUE(CheckLaunchOptions(o).ok()) << "--min-nodes = --nnodes: not elastic, no restarts needed";
  EXPECT_FALSE(o.Elastic());
}

TEST(NodeOptions, TokenFile) {
  char path[] = "/tmp/psync-token-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "s3cret\n";
  absl::StatusOr<std::string> t = ReadTokenFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "s3cret") << "the trailing newline is not part of it";
  std::ofstream(path) << " \n";
  EXPECT_EQ(ReadTokenFile(path).status().message(), absl::StrCat("--token-file: '", path, "' is empty"));
  std::remove(path);
  EXPECT_EQ(ReadTokenFile(path).status().message(),
            absl::StrCat("--token-file: cannot read '", path, "': No such file or directory"));
}

TEST(NodeOptions, NodeIRunsRanksIKToIKPlusKMinusOne) {
  LaunchOptions o = Node(3, 2);
  o.nproc = 4;
  for (int local = 0; local < 4; ++local) {
    const RankSlot s = NodeSlot(o, local);
    EXPECT_EQ(s.rank, 8 + local);
    EXPECT_EQ(s.world_size, 12);
    EXPECT_EQ(s.local_rank, local);
    EXPECT_EQ(s.local_world_size, 4);
  }
}

}  // namespace
}  // namespace psync::launch
