#include "client/launch/child_commands.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace psync::launch {
namespace {

void AddToken(const LaunchOptions& o, Command* c) {
  if (!o.token.empty()) c->env.push_back("PSYNC_TOKEN=" + o.token);
}

// psyncctl against `coordinator` running `args` (the token in the environment).
Command PsyncctlCommand(const LaunchOptions& o, const std::string& coordinator, std::vector<std::string> args) {
  Command c;
  c.argv = {o.psyncctl_bin, "--coordinator=" + coordinator};
  if (!o.tls_ca.empty()) c.argv.push_back("--tls-ca=" + o.tls_ca);
  for (std::string& a : args) c.argv.push_back(std::move(a));
  c.env = {"PSYNC_TOKEN=" + o.token};
  return c;
}

}  // namespace

RankSlot NodeSlot(const LaunchOptions& o, int local) {
  return RankSlot{o.FirstRank() + local, o.WorldSize(), local, o.nproc};
}

Command CoordinatorCommand(const LaunchOptions& o, const std::string& port_file, const std::string& state_dir) {
  Command c;
  c.argv = {o.coordinator_bin, absl::StrCat("--host=", o.host), absl::StrCat("--port=", o.port),
            absl::StrCat("--world-size=", o.WorldSize()), absl::StrCat("--job-id=", o.job_id),
            absl::StrCat("--port-file=", port_file), absl::StrCat("--state-dir=", state_dir)};
  // Restartable: the coordinator takes the world back as its next generation.
  if (o.max_restarts > 0) {
    c.argv.push_back(absl::StrCat("--max-restarts=", o.max_restarts));
    c.argv.push_back(absl::StrCat("--recovery=", o.recovery));
  }
  // Why: how long ranks wait for the other nodes (--coordinator-args, after it, may still say otherwise).
  if (o.NodeMode()) c.argv.push_back(absl::StrCat("--join-timeout=", o.join_timeout.count(), "ms"));
  // Elastic: a generation may go on with --min-nodes nodes' ranks.
  if (o.Elastic()) {
    c.argv.push_back(absl::StrCat("--min-world-size=", o.min_nodes * o.nproc));
    c.argv.push_back(absl::StrCat("--rejoin-timeout=", o.rejoin_timeout.count(), "ms"));
  }
  for (const std::string& a : o.coordinator_args) c.argv.push_back(a);
  AddToken(o, &c);
  return c;
}

Command RelayCommand(const LaunchOptions& o, const std::string& coordinator, const std::string& port_file) {
  Command c;
  c.argv = {o.relay_bin, absl::StrCat("--coordinator=", coordinator), "--port=0",
            absl::StrCat("--port-file=", port_file), absl::StrCat("--expect-ranks=", o.nproc)};
  if (!o.tls_ca.empty()) c.argv.push_back(absl::StrCat("--tls-ca=", o.tls_ca));
  AddToken(o, &c);
  return c;
}

Command WorkerCommand(const LaunchOptions& o, const JobAddress& at, const std::vector<std::string>& flags,
                      const RankSlot& slot, int restart) {
  Command c;
  c.argv = {o.worker_bin};
  for (const std::string& f : flags) c.argv.push_back(f);
  c.argv.push_back(absl::StrCat("--rank=", slot.rank));
  c.argv.push_back(absl::StrCat("--world-size=", slot.world_size));
  c.argv.push_back(absl::StrCat("--local-rank=", slot.local_rank));
  c.argv.push_back(absl::StrCat("--coordinator=", at.coordinator));
  c.argv.push_back(absl::StrCat("--job-id=", o.job_id));
  if (!o.tls_ca.empty()) c.argv.push_back(absl::StrCat("--tls-ca=", o.tls_ca));
  if (!at.relay.empty()) c.argv.push_back(absl::StrCat("--plan-relay=", at.relay));
  // LOCAL_WORLD_SIZE lets --backend=auto use shared memory between the
  // ranks on this host. PSYNC_RESTART_COUNT: how many times the workers
  // were restarted (as torchrun's TORCHELASTIC_RESTART_COUNT).
  c.env = {absl::StrCat("RANK=", slot.rank),
           absl::StrCat("WORLD_SIZE=", slot.world_size),
           absl::StrCat("LOCAL_RANK=", slot.local_rank),
           absl::StrCat("LOCAL_WORLD_SIZE=", slot.local_world_size),
           "MASTER_ADDR=" + at.coordinator.substr(0, at.coordinator.rfind(':')),
           absl::StrCat("MASTER_PORT=", at.port),
           absl::StrCat("PSYNC_RESTART_COUNT=", restart)};
  // Why: every node is one host, also two launchers on one machine (the
  // workers' default identity would put both nodes' ranks on one host).
  if (!o.host_id.empty()) c.env.push_back("PSYNC_HOST_ID=" + o.host_id);
  AddToken(o, &c);
  // Many workers on few cores: one BLAS thread each unless the user chose.
  if (!std::getenv("OPENBLAS_NUM_THREADS")) c.env.push_back("OPENBLAS_NUM_THREADS=1");
  return c;
}

Command ShutdownCommand(const LaunchOptions& o, const std::string& coordinator) {
  return PsyncctlCommand(o, coordinator, {"shutdown"});
}

Command RegroupCommand(const LaunchOptions& o, const std::string& coordinator, const std::string& reason) {
  return PsyncctlCommand(o, coordinator, {absl::StrCat("--reason=", reason), "regroup"});
}

Command StatusCommand(const LaunchOptions& o, const std::string& coordinator) {
  return PsyncctlCommand(o, coordinator, {"--json", "status"});
}

}  // namespace psync::launch
