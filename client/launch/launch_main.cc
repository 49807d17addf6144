// psync-launch: a coordinator plus N local workers, like torchrun --standalone.
//
//   psync-launch --nproc=N [--port=0] [--job-id=psync] [--token=T] -- [worker flags]
//
// Starts psync-coordinator (found next to this binary, in the build tree, or
// on PATH) on 127.0.0.1, waits for its port file, then starts N psync-workers
// with --rank/--world-size/--coordinator set (and the torchrun environment:
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), passing the worker
// flags to each. Rank 0's stdout (progress) is shown; other ranks' stdout is
// dropped; every stderr is shown. Children run in their own process group, so
// a terminal Ctrl-C reaches only the launcher, which then stops the job
// through the coordinator's Shutdown RPC (psyncctl shutdown): every worker
// stops after the same iteration and exits 0. A second Ctrl-C (or workers
// that don't stop in time) sends SIGTERM, then SIGKILL. The launcher never
// starts gRPC itself (it forks), so it talks to the coordinator via psyncctl.
//
// Plan relay (--relay, default on with --nproc > 1): the launcher also starts
// psync-relay (client/relay/README.md) and gives the workers
// --plan-relay=127.0.0.1:PORT, so the host's ranks share one Train stream to
// the coordinator (one report message and one plan per iteration for the
// host). Its exit while workers run stops the job like the coordinator's.
//
// Token: without --token / PSYNC_TOKEN the launcher makes a random one for
// the job (so nobody else on the machine, or on the network with
// --host=0.0.0.0, can stop the job or touch its rendezvous keys) and passes
// it to every child in the environment; it is also written (mode 0600) to
// <tmpdir>/token, printed at start, for your own psyncctl calls.
//
// Restarts (--max-restarts=N, like torchrun's): when a worker fails (exits
// non-zero, or is killed), the launcher names it in one line, stops the other
// workers of that generation (SIGTERM, then SIGKILL) and starts all N again
// with the same flags (plus --resume when they name a --checkpoint-dir) and
// PSYNC_RESTART_COUNT set, up to N times. The coordinator keeps running
// (started with --max-restarts=N) and takes the world back as its next
// generation. Exit 2 (bad flags or input) is not restarted; nor is anything
// after a Ctrl-C. The job: launcher.h (Launcher); decisions: restart_policy.h;
// processes: child_process.h.
//
// Across nodes (torchrun's shape): psync-launch --nnodes=N --node-rank=I
// --nproc=K --coordinator=HOST:PORT [--start-coordinator] on every node
// (env NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT); node I runs ranks
// I*K..I*K+K-1 with its own relay; node 0 starts the coordinator with
// --start-coordinator. The token comes from PSYNC_TOKEN or --token-file.
// Restarts follow the coordinator: when it opens a new generation, every
// node restarts its ranks (client/launch/README.md, "Across nodes").
//
// Exit status: the worst of the final generation's exit codes (0
// done/stopped, 1 internal, 2 bad flags, 3 rendezvous, 4 peer lost, 5
// coordinator lost; a worker killed by a signal counts as 128+signal), or the
// launcher's own: 2 for bad flags, 3 when the coordinator (or the relay) does not start.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "client/launch/find_binary.h"
#include "client/launch/launch_options.h"
#include "client/launch/launcher.h"
#include "common/flags.h"

ABSL_FLAG(int, nproc, 0, "number of local workers (required)");
ABSL_FLAG(int, nnodes, 1, "nodes of the job (env NNODES); > 1 needs --coordinator");
ABSL_FLAG(int, node_rank, 0, "this node, 0..nnodes-1 (env NODE_RANK): it runs ranks node_rank*nproc .. +nproc-1");
ABSL_FLAG(std::string, coordinator, "",
          "HOST:PORT of the job's coordinator (with --nnodes > 1 default: env MASTER_ADDR:MASTER_PORT); "
          "restarts then follow it; empty: start one on --host for this host alone");
ABSL_FLAG(bool, start_coordinator, false, "node 0 starts the coordinator at --coordinator (other nodes ignore it)");
ABSL_FLAG(std::string, token_file, "", "file holding the job's token (instead of PSYNC_TOKEN)");
ABSL_FLAG(absl::Duration, join_timeout, absl::Seconds(300),
          "with --coordinator: how long a node waits for the coordinator to answer, and (--start-coordinator) "
          "the coordinator's --join-timeout, how long ranks wait for every node");
ABSL_FLAG(int, min_nodes, 0,
          "elastic job (with --nnodes, --max-restarts): when nodes are lost and not back within --rejoin-timeout, "
          "the next generation goes on with the nodes there, down to this many; the global batch stays (each "
          "rank's share grows, --accumulate adapts), the job resumes from its checkpoint, and a node that comes "
          "back joins at the next generation (the coordinator started with --min-world-size); 0 = --nnodes");
ABSL_FLAG(absl::Duration, rejoin_timeout, absl::Seconds(30),
          "elastic job: how long a generation waits for every node before it goes on with fewer");
ABSL_FLAG(int, port, 0, "coordinator port (0 = pick a free one)");
ABSL_FLAG(std::string, host, "127.0.0.1", "address the coordinator binds to and workers connect to");
ABSL_FLAG(std::string, job_id, "psync", "job id");
ABSL_FLAG(std::string, token, "", "shared secret (env PSYNC_TOKEN; default: a random one for this job)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA / certificate the workers and psyncctl trust: connect over TLS (env PSYNC_TLS_CA; "
          "serve TLS with --coordinator-args='--tls-cert=C --tls-key=K')");
ABSL_FLAG(std::string, coordinator_bin, "", "path of psync-coordinator (default: found next to psync-launch)");
ABSL_FLAG(std::string, worker_bin, "", "path of psync-worker (default: found next to psync-launch)");
ABSL_FLAG(std::string, psyncctl_bin, "", "path of psyncctl (default: found next to psync-launch)");
ABSL_FLAG(std::string, coordinator_args, "", "extra flags for psync-coordinator, space separated");
ABSL_FLAG(absl::Duration, grace, absl::Seconds(30),
          "after a stop request or a failed worker: how long workers get to exit before SIGTERM");
ABSL_FLAG(bool, relay, true,
          "with --nproc > 1: run psync-relay, so this host's workers reach the coordinator on one Train stream "
          "(one report message and one plan per host per iteration); --relay=false: one stream per worker");
ABSL_FLAG(std::string, relay_bin, "", "path of psync-relay (default: found next to psync-launch)");
ABSL_FLAG(bool, all_output, false, "show every rank's stdout, not only rank 0's");
ABSL_FLAG(std::string, recovery, psync::launch::LaunchOptions{}.recovery,
          "with --max-restarts: live = only a failed worker is started again and the others keep training "
          "(they rejoin in memory and heal the replacement; the coordinator runs with --recovery=live); "
          "restart = every worker is stopped and started again from the newest checkpoint");
ABSL_FLAG(int, max_restarts, 0,
          "when a worker fails (exit != 0 but 2, or killed), stop the others and start every worker again, at "
          "most this many times (the coordinator runs with --max-restarts and takes the world back as its next "
          "generation; workers get --resume when they have a --checkpoint-dir); 0 = a failed worker ends the job");

namespace {

using psync::launch::FindBinary;
using psync::launch::LaunchOptions;

const std::set<std::string> kFlags = {"nproc", "port", "host", "job_id", "token", "tls_ca", "coordinator_bin",
                                      "worker_bin", "psyncctl_bin", "coordinator_args", "grace",
                                      "all_output", "max_restarts", "recovery", "relay", "relay_bin", "nnodes", "node_rank",
                                      "coordinator", "start_coordinator", "token_file", "join_timeout",
                                      "min_nodes", "rejoin_timeout"};

std::vector<std::string> SplitSpaces(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

std::optional<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

psync::launch::LaunchEnvironment ReadEnvironment() {
  psync::launch::LaunchEnvironment env;
  env.nnodes = Env("NNODES");
  env.node_rank = Env("NODE_RANK");
  env.master_addr = Env("MASTER_ADDR");
  env.master_port = Env("MASTER_PORT");
  env.token = Env("PSYNC_TOKEN");
  env.tls_ca = Env("PSYNC_TLS_CA");
  env.host_id = Env("PSYNC_HOST_ID");
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof(host), "host");
  env.hostname = host;
  return env;
}

// The flags as LaunchOptions, then the environment fills in what they did
// not give (ApplyEnvironment); InvalidArgument names the flag or variable.
absl::StatusOr<LaunchOptions> OptionsFromFlags(const psync::ParsedArgs& parsed) {
  LaunchOptions o;
  o.nproc = absl::GetFlag(FLAGS_nproc);
  o.port = absl::GetFlag(FLAGS_port);
  o.host = absl::GetFlag(FLAGS_host);
  o.job_id = absl::GetFlag(FLAGS_job_id);
  o.token = absl::GetFlag(FLAGS_token);
  if (parsed.given("token") && parsed.given("token_file")) {
    return absl::InvalidArgumentError("--token-file: pass either --token or --token-file, not both");
  }
  if (parsed.given("token_file")) {
    absl::StatusOr<std::string> t = psync::launch::ReadTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!t.ok()) return t.status();
    o.token = *t;
  }
  o.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  o.nnodes = absl::GetFlag(FLAGS_nnodes);
  o.node_rank = absl::GetFlag(FLAGS_node_rank);
  o.coordinator = absl::GetFlag(FLAGS_coordinator);
  o.start_coordinator = absl::GetFlag(FLAGS_start_coordinator);
  o.join_timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_join_timeout)));
  o.min_nodes = absl::GetFlag(FLAGS_min_nodes);
  o.rejoin_timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_rejoin_timeout)));
  o.coordinator_args = SplitSpaces(absl::GetFlag(FLAGS_coordinator_args));
  o.grace = std::chrono::milliseconds(absl::ToInt64Milliseconds(absl::GetFlag(FLAGS_grace)));
  o.relay = absl::GetFlag(FLAGS_relay);
  o.all_output = absl::GetFlag(FLAGS_all_output);
  o.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  o.recovery = absl::GetFlag(FLAGS_recovery);
  o.worker_flags = parsed.after_dashes;
  if (absl::Status st = ApplyEnvironment(ReadEnvironment(), parsed.specified, &o); !st.ok()) return st;
  return o;
}

// Finds the binaries (each error printed); false when one that is needed is missing.
bool FindBinaries(LaunchOptions* o) {
  auto find = [](const std::string& flag_value, const std::string& name, const std::vector<std::string>& rel,
                 const std::string& flag, std::string* out) {
    absl::StatusOr<std::string> p = FindBinary(flag_value, name, rel, flag);
    if (!p.ok()) std::cerr << "psync-launch: " << p.status().message() << "\n";
    *out = p.ok() ? *p : std::string();
    return p.ok();
  };
  const bool coordinator = !o->StartsCoordinator() || find(absl::GetFlag(FLAGS_coordinator_bin), "psync-coordinator",
                                                           {"server", "bin"}, "coordinator-bin", &o->coordinator_bin);
  const bool worker =
      find(absl::GetFlag(FLAGS_worker_bin), "psync-worker", {"worker/runtime", "bin"}, "worker-bin", &o->worker_bin);
  const bool ctl = find(absl::GetFlag(FLAGS_psyncctl_bin), "psyncctl", {"client", "client/psyncctl", "client/ctl", "bin"},
                        "psyncctl-bin", &o->psyncctl_bin);
  if (!coordinator || !worker) return false;
  if (o->UseRelay() &&
      !find(absl::GetFlag(FLAGS_relay_bin), "psync-relay", {"client/relay", "bin"}, "relay-bin", &o->relay_bin)) {
    std::cerr << "psync-launch: (or pass --relay=false to run without the plan relay)\n";
    return false;
  }
  if (!ctl && o->NodeMode()) {
    std::cerr << "psync-launch: --coordinator: a node follows its job through psyncctl (pass --psyncctl-bin)\n";
    return false;
  }
  if (!ctl) std::cerr << "psync-launch: warning: without psyncctl, Ctrl-C stops workers with SIGTERM\n";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // The coordinator and the workers write to this same stderr. std::cerr is
  // unbuffered, so "a << b << c" would be several write(2)s and a child's log
  // line could land inside one of ours (seen: the address line torn by the
  // coordinator's first line). Line-buffered, each line is one write.
  std::setvbuf(stderr, nullptr, _IOLBF, 1 << 16);
  std::cerr << std::nounitbuf;
  absl::StatusOr<psync::ParsedArgs> parsed = psync::ParseFlagsStrict(argc, argv, kFlags, /*stop_at_dashes=*/true);
  if (!parsed.ok()) {
    std::cerr << "psync-launch: " << parsed.status().message() << "\n";
    return 2;
  }
  if (parsed->help) {
    std::cout << "usage: psync-launch --nproc=N [--port=0] [--job-id=psync] [--token=T] -- [worker flags]\n"
              << "       psync-launch --nnodes=N --node-rank=I --nproc=K --coordinator=HOST:PORT "
                 "[--start-coordinator] [--token-file=F] -- [worker flags]\n"
              << psync::FlagsHelp(kFlags);
    return 0;
  }
  if (!parsed->positional.empty()) {
    std::cerr << "psync-launch: unexpected argument '" << parsed->positional.front()
              << "' (worker flags go after a bare --)\n";
    return 2;
  }
  absl::StatusOr<LaunchOptions> resolved = OptionsFromFlags(*parsed);
  absl::Status st = resolved.ok() ? psync::launch::CheckLaunchOptions(*resolved) : resolved.status();
  if (!st.ok()) {
    std::cerr << "psync-launch: " << st.message() << "\n";
    return 2;
  }
  LaunchOptions opt = std::move(*resolved);
  if (!FindBinaries(&opt)) return 2;
  psync::launch::Launcher launcher(std::move(opt));
  return launcher.Run();
}
