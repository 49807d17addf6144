// What psync-launch starts each child with: flags, the torchrun environment,
// and the token only ever in the environment.
#include "client/launch/child_commands.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

namespace psync::launch {
namespace {

using Strings = std::vector<std::string>;

LaunchOptions Opts() {
  LaunchOptions o;
  o.nproc = 2;
  o.job_id = "j1";
  o.token = "s3cret";
  o.coordinator_bin = "/b/psync-coordinator";
  o.worker_bin = "/b/psync-worker";
  o.relay_bin = "/b/psync-relay";
  o.psyncctl_bin = "/b/psyncctl";
  return o;
}

bool Has(const Strings& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

void ExpectTokenOnlyInEnv(const Command& c) {
  for (const std::string& a : c.argv) EXPECT_EQ(a.find("s3cret"), std::string::npos) << a;
  EXPECT_TRUE(Has(c.env, "PSYNC_TOKEN=s3cret"));
}

TEST(ChildCommands, Coordinator) {
  LaunchOptions o = Opts();
  o.port = 29500;
  o.coordinator_args = {"--liveness-period=1s"};
  Command c = CoordinatorCommand(o, "/tmp/d/port", "/tmp/d/coordinator");
  EXPECT_EQ(c.argv, (Strings{"/b/psync-coordinator", "--host=127.0.0.1", "--port=29500", "--world-size=2",
                             "--job-id=j1", "--port-file=/tmp/d/port", "--state-dir=/tmp/d/coordinator",
                             "--liveness-period=1s"}));
  ExpectTokenOnlyInEnv(c);
  o.max_restarts = 3;
  EXPECT_TRUE(Has(CoordinatorCommand(o, "p", "s").argv, "--max-restarts=3")) << "restartable";
}

TEST(ChildCommands, Relay) {
  LaunchOptions o = Opts();
  Command c = RelayCommand(o, "127.0.0.1:29500", "/tmp/d/relay_port");
  EXPECT_EQ(c.argv, (Strings{"/b/psync-relay", "--coordinator=127.0.0.1:29500", "--port=0",
                             "--port-file=/tmp/d/relay_port", "--expect-ranks=2"}));
  ExpectTokenOnlyInEnv(c);
  o.tls_ca = "/ca.pem";
  EXPECT_EQ(RelayCommand(o, "h:1", "p").argv.back(), "--tls-ca=/ca.pem");
}

TEST(ChildCommands, WorkerGetsItsRankTheJobAndTheTorchrunEnvironment) {
  LaunchOptions o = Opts();
  o.tls_ca = "/ca.pem";
  const JobAddress at{"10.0.0.5:29500", 29500, "127.0.0.1:41000"};
  Command c = WorkerCommand(o, at, {"--steps=5", "--resume"}, RankSlot{1, 2, 1, 2}, 3);
  EXPECT_EQ(c.argv, (Strings{"/b/psync-worker", "--steps=5", "--resume", "--rank=1", "--world-size=2",
                             "--local-rank=1", "--coordinator=10.0.0.5:29500", "--job-id=j1", "--tls-ca=/ca.pem",
                             "--plan-relay=127.0.0.1:41000"}));
  for (const char* kv : {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=10.0.0.5",
                         "MASTER_PORT=29500", "PSYNC_RESTART_COUNT=3"}) {
    EXPECT_TRUE(Has(c.env, kv)) << kv;
  }
  ExpectTokenOnlyInEnv(c);
  EXPECT_EQ(Has(c.env, "OPENBLAS_NUM_THREADS=1"), std::getenv("OPENBLAS_NUM_THREADS") == nullptr)
      << "one BLAS thread each unless the user chose";
}

TEST(ChildCommands, WorkerWithoutRelayOrTls) {
  const JobAddress at{"127.0.0.1:5", 5, ""};
  Command c = WorkerCommand(Opts(), at, {}, RankSlot{0, 2, 0, 2}, 0);
  for (const std::string& a : c.argv) {
    EXPECT_NE(a.rfind("--plan-relay", 0), 0u) << a;
    EXPECT_NE(a.rfind("--tls-ca", 0), 0u) << a;
  }
  EXPECT_TRUE(Has(c.env, "PSYNC_RESTART_COUNT=0"));
}

TEST(ChildCommands, NodeModeCoordinatorWorkerAndStatus) {
  LaunchOptions o = Opts();
  o.nnodes = 2;
  o.node_rank = 0;
  o.coordinator = "10.0.0.1:29611";
  o.start_coordinator = true;
  o.host = "10.0.0.1";
  o.port = 29611;
  o.host_id = "gpu7/node0";
  o.join_timeout = std::chrono::milliseconds(5000);
  Command c = CoordinatorCommand(o, "/tmp/d/port", "/tmp/d/coordinator");
  EXPECT_EQ(c.argv, (Strings{"/b/psync-coordinator", "--host=10.0.0.1", "--port=29611", "--world-size=4",
                             "--job-id=j1", "--port-file=/tmp/d/port", "--state-dir=/tmp/d/coordinator",
                             "--join-timeout=5000ms"}))
      << "the whole job's world; ranks wait --join-timeout for the other nodes";
  ExpectTokenOnlyInEnv(c);
  o.min_nodes = 1;
  o.max_restarts = 1;
  o.rejoin_timeout = std::chrono::milliseconds(3000);
  EXPECT_EQ(CoordinatorCommand(o, "/tmp/d/port", "/tmp/d/coordinator").argv,
            (Strings{"/b/psync-coordinator", "--host=10.0.0.1", "--port=29611", "--world-size=4", "--job-id=j1",
                     "--port-file=/tmp/d/port", "--state-dir=/tmp/d/coordinator", "--max-restarts=1", "--recovery=live", "--join-timeout=5000ms", "--min-world-size=2",
                     "--rejoin-timeout=3000ms"}))
      << "elastic: a generation may go on with --min-nodes nodes' ranks";
  EXPECT_EQ(RegroupCommand(o, "10.0.0.1:29611", "node 1 is back").argv,
            (Strings{"/b/psyncctl", "--coordinator=10.0.0.1:29611", "--reason=node 1 is back", "regroup"}));
  o.node_rank = 1;
  const JobAddress at{"10.0.0.1:29611", 29611, "127.0.0.1:41000"};
  Command w = WorkerCommand(o, at, {}, NodeSlot(o, 1), 0);
  for (const char* kv : {"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=10.0.0.1",
                         "MASTER_PORT=29611", "PSYNC_HOST_ID=gpu7/node0"}) {
    EXPECT_TRUE(Has(w.env, kv)) << kv;
  }
  EXPECT_TRUE(Has(w.argv, "--rank=3"));
  EXPECT_TRUE(Has(w.argv, "--local-rank=1"));
  EXPECT_FALSE(Has(WorkerCommand(Opts(), at, {}, RankSlot{0, 2, 0, 2}, 0).env, "PSYNC_HOST_ID=gpu7/node0"))
      << "one host alone: the workers' own host identity";
  Command s = StatusCommand(o, "10.0.0.1:29611");
  EXPECT_EQ(s.argv, (Strings{"/b/psyncctl", "--coordinator=10.0.0.1:29611", "--json", "status"}));
  ExpectTokenOnlyInEnv(s);
}

TEST(ChildCommands, Shutdown) {
  LaunchOptions o = Opts();
  Command c = ShutdownCommand(o, "127.0.0.1:29500");
  EXPECT_EQ(c.argv, (Strings{"/b/psyncctl", "--coordinator=127.0.0.1:29500", "shutdown"}));
  ExpectTokenOnlyInEnv(c);
  o.tls_ca = "/ca.pem";
  EXPECT_EQ(ShutdownCommand(o, "h:1").argv, (Strings{"/b/psyncctl", "--coordinator=h:1", "--tls-ca=/ca.pem", "shutdown"}));
}

}  // namespace
}  // namespace psync::launch
