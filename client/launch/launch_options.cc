#include "client/launch/launch_options.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace psync::launch {
namespace {

// Worker flags psync-launch sets for every worker itself.
absl::Status CheckWorkerFlags(const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    for (const char* reserved : {"--rank", "--world-size", "--world_size", "--coordinator", "--local-rank",
                                 "--local_rank", "--job-id", "--job_id", "--token", "--tls-ca", "--tls_ca"}) {
      const std::string r = reserved;
      if (f == r || f.rfind(r + "=", 0) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("worker flag ", r, " is set by the launcher; use psync-launch's own flags"));
      }
    }
  }
  return absl::OkStatus();
}

// An integer from the environment; InvalidArgument names the variable.
absl::Status EnvInt(const std::optional<std::string>& value, const char* name, int* out) {
  if (!value) return absl::OkStatus();
  if (!absl::SimpleAtoi(*value, out)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", *value, "' is not a number"));
  }
  return absl::OkStatus();
}

absl::Status CheckNodeOptions(const LaunchOptions& o) {
  if (o.nnodes < 1) return absl::InvalidArgumentError(absl::StrCat("--nnodes: must be >= 1 (got ", o.nnodes, ")"));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("--node-rank: ", o.node_rank, " is not a node of --nnodes=",
                                                   o.nnodes, " (0..", o.nnodes - 1, ")"));
  }
  if (o.nnodes > 1 && !o.NodeMode()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", o.nnodes, ": every node needs the job's coordinator: pass --coordinator=HOST:PORT (or set "
        "MASTER_ADDR and MASTER_PORT) on each node, and --start-coordinator to start it on node 0"));
  }
  if (o.start_coordinator && !o.NodeMode()) {
    return absl::InvalidArgumentError("--start-coordinator: needs --coordinator=HOST:PORT, the address to start it at");
  }
  if (o.NodeMode() && o.token.empty()) {
    // Why: a token made up here would be this node's alone.
    return absl::InvalidArgumentError(
        "--coordinator: a job whose coordinator is named needs the job's token on every node: set PSYNC_TOKEN or "
        "pass --token-file=FILE (the same on each node)");
  }
  if (o.join_timeout <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("--join-timeout: must be positive");
  }
  if (o.min_nodes < 0 || o.min_nodes > o.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min-nodes: must be in 1..--nnodes (", o.nnodes, "), got ", o.min_nodes));
  }
  if (o.min_nodes > 0 && o.min_nodes < o.nnodes && o.max_restarts < 1) {
    // Why: a lost node ends its generation; only a restart opens the next.
    return absl::InvalidArgumentError(absl::StrCat(
        "--min-nodes=", o.min_nodes, ": an elastic job goes on without a lost node as its next generation, "
        "which needs --max-restarts=N (N >= 1)"));
  }
  if (o.rejoin_timeout <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("--rejoin-timeout: must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SplitHostPort(const std::string& address, const std::string& flag, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  const bool bracketed = !address.empty() && address.front() == '[';
  if (colon == std::string::npos || colon == 0 || (bracketed && address[colon - 1] != ']') ||
      !absl::SimpleAtoi(address.substr(colon + 1), port) || *port < 1 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", address, "' is not HOST:PORT (port 1..65535)"));
  }
  *host = address.substr(0, colon);
  return absl::OkStatus();
}

absl::Status ApplyEnvironment(const LaunchEnvironment& env, const std::set<std::string>& given, LaunchOptions* o) {
  if (!given.count("nnodes")) {
    if (absl::Status st = EnvInt(env.nnodes, "NNODES", &o->nnodes); !st.ok()) return st;
  }
  if (!given.count("node_rank")) {
    if (absl::Status st = EnvInt(env.node_rank, "NODE_RANK", &o->node_rank); !st.ok()) return st;
  }
  if (!given.count("coordinator") && o->nnodes > 1 && env.master_addr && !env.master_addr->empty()) {
    int port = 29500;  // torchrun's default MASTER_PORT
    if (absl::Status st = EnvInt(env.master_port, "MASTER_PORT", &port); !st.ok()) return st;
    o->coordinator = absl::StrCat(*env.master_addr, ":", port);
  }
  if (o->token.empty() && !given.count("token") && !given.count("token_file") && env.token) o->token = *env.token;
  if (!given.count("tls_ca") && env.tls_ca) o->tls_ca = *env.tls_ca;
  if (!o->NodeMode()) return absl::OkStatus();
  if (given.count("port")) {
    return absl::InvalidArgumentError("--port: with --coordinator the coordinator's port is the one it names");
  }
  std::string host;
  if (absl::Status st = SplitHostPort(o->coordinator, "--coordinator", &host, &o->port); !st.ok()) return st;
  if (!given.count("host")) o->host = host;
  if (o->nnodes > 1) {
    o->host_id = absl::StrCat(env.host_id && !env.host_id->empty() ? *env.host_id : env.hostname, "/node", o->node_rank);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token-file: cannot read '", path, "': ", std::strerror(errno)));
  }
  std::stringstream text;
  text << f.rdbuf();
  std::string token(absl::StripTrailingAsciiWhitespace(text.str()));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("--token-file: '", path, "' is empty"));
  return token;
}

absl::Status CheckLaunchOptions(const LaunchOptions& o) {
  if (o.nproc <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nproc: must be a positive number of workers (got ", o.nproc, ")"));
  }
  if (o.max_restarts < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--max-restarts: must be >= 0 (got ", o.max_restarts, ")"));
  }
  if (o.recovery != "live" && o.recovery != "restart") {
    return absl::InvalidArgumentError(absl::StrCat("--recovery: must be live or restart (got '", o.recovery, "')"));
  }
  for (const std::string& a : o.coordinator_args) {
    if (a.rfind("--recovery", 0) == 0) {
      return absl::InvalidArgumentError(
          "--coordinator-args: pass --recovery to psync-launch itself (it sets the coordinator's and decides "
          "which workers it starts again)");
    }
    if (a.rfind("--max-restarts", 0) == 0 || a.rfind("--max_restarts", 0) == 0) {
      return absl::InvalidArgumentError(
          "--coordinator-args: pass --max-restarts to psync-launch itself (it sets the coordinator's and "
          "restarts the workers)");
    }
  }
  if (o.port < 0 || o.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port: ", o.port, " is not a port (0 = pick a free one)"));
  }
  if (!o.tls_ca.empty() && access(o.tls_ca.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-ca: cannot read '", o.tls_ca, "': ", std::strerror(errno)));
  }
  if (absl::Status st = CheckWorkerFlags(o.worker_flags); !st.ok()) return st;
  return CheckNodeOptions(o);
}

}  // namespace psync::launch
