// LaunchOptions: what psync-launch was asked to run (its flags, resolved:
// the token, the TLS CA and the node's place in a multi-node job with their
// environment fallbacks, the executables found), and the checks that refuse
// a bad combination before anything starts. docs/cli-contract.md
// ("psync-launch") is the user-facing list.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace psync::launch {

struct LaunchOptions {
  int nproc = 0;                      // workers on this node: local ranks 0..nproc-1
  int port = 0;                       // the coordinator's port (0 = a free one); from `coordinator` in node mode
  std::string host = "127.0.0.1";     // the coordinator binds here (0.0.0.0: reached at 127.0.0.1)
  std::string job_id = "psync";
  std::string token;                  // empty: the launcher makes one for the job (not in node mode)
  std::string tls_ca;                 // PEM CA the workers and psyncctl trust (empty = plaintext)
  std::vector<std::string> coordinator_args;  // extra psync-coordinator flags
  std::chrono::milliseconds grace{30000};     // after a stop request or a failed worker, before SIGTERM
  bool relay = true;                  // psync-relay for the host's ranks (only with nproc > 1)
  bool all_output = false;            // every rank's stdout, not only rank 0's
  int max_restarts = 0;               // restarts of every worker after a failure (restart_policy.h)
  // --recovery (with max_restarts): live = only a failed worker is replaced
  // and the others keep training (the coordinator's --recovery=live);
  // restart = every worker is started again. LiveRecovery() reads it.
  std::string recovery = "live";
  std::vector<std::string> worker_flags;  // after a bare `--`, to every worker

  // One node of a job (torchrun's --nnodes/--node-rank): node I runs ranks
  // I*nproc .. I*nproc+nproc-1 of nnodes*nproc, against the coordinator at
  // `coordinator`, which node 0 starts with start_coordinator.
  int nnodes = 1;
  int node_rank = 0;
  std::string coordinator;            // HOST:PORT; empty = a coordinator of our own for this host alone
  bool start_coordinator = false;     // only node 0 acts on it
  std::string host_id;                // PSYNC_HOST_ID for this node's workers (nnodes > 1), else empty
  std::chrono::milliseconds join_timeout{300000};  // node mode: how long the nodes wait for each other
  // Elastic (--min-nodes < --nnodes): a generation may go on with at least
  // min_nodes nodes once the others were not back within rejoin_timeout
  // (the coordinator's --min-world-size / --rejoin-timeout); 0 = nnodes.
  int min_nodes = 0;
  std::chrono::milliseconds rejoin_timeout{30000};

  // Executables (find_binary.h); an empty psyncctl_bin means none was found
  // (Ctrl-C then stops the workers with SIGTERM), an empty relay_bin that
  // the relay is not used.
  std::string coordinator_bin, worker_bin, relay_bin, psyncctl_bin;

  bool LiveRecovery() const { return max_restarts > 0 && recovery == "live"; }
  // Why only with several ranks: one rank has one stream either way.
  bool UseRelay() const { return relay && nproc > 1; }
  // Node mode: the job's coordinator is named (--coordinator, or MASTER_ADDR
  // with --nnodes > 1); restarts follow it (client/launch/README.md).
  bool NodeMode() const { return !coordinator.empty(); }
  // This launcher runs the coordinator: always on one host alone; in node
  // mode node 0 with --start-coordinator.
  bool StartsCoordinator() const { return !NodeMode() || (start_coordinator && node_rank == 0); }
  int WorldSize() const { return nnodes * nproc; }
  bool Elastic() const { return NodeMode() && min_nodes > 0 && min_nodes < nnodes; }
  int FirstRank() const { return node_rank * nproc; }
};

// What psync-launch reads from its environment, as torchrun and Kubeflow set
// it (nullopt = unset), and the host name (the base of the node's host id).
struct LaunchEnvironment {
  std::optional<std::string> nnodes, node_rank, master_addr, master_port;  // NNODES ... MASTER_PORT
  std::optional<std::string> token, tls_ca, host_id;                       // PSYNC_TOKEN, PSYNC_TLS_CA, PSYNC_HOST_ID
  std::string hostname;
};

// Fills in what the flags (`given`: the underscore names of the flags given)
// left to the environment: --nnodes <- NNODES, --node-rank <- NODE_RANK,
// --coordinator <- MASTER_ADDR:MASTER_PORT (29500 by default; only with
// --nnodes > 1, so a stray MASTER_ADDR never sends a one-host job elsewhere),
// the token <- PSYNC_TOKEN (unless --token or --token-file gave it), --tls-ca
// <- PSYNC_TLS_CA; then in node mode the coordinator's bind host and port
// (--host, when not given, is --coordinator's host) and, with --nnodes > 1,
// the workers' host id ("<PSYNC_HOST_ID or hostname>/node<I>": every node is
// one host, even two launchers on one machine). InvalidArgument names the
// variable whose value is not a number.
absl::Status ApplyEnvironment(const LaunchEnvironment& env, const std::set<std::string>& given, LaunchOptions* o);

// The job's token from --token-file: the file's text without trailing
// whitespace. InvalidArgument naming the file when it cannot be read or is empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// "HOST:PORT" -> HOST (brackets of an IPv6 address kept) and PORT 1..65535;
// InvalidArgument naming `flag` otherwise.
absl::Status SplitHostPort(const std::string& address, const std::string& flag, std::string* host, int* port);

// InvalidArgument naming the flag (psync-launch exits 2), checked in this
// order: --nproc, --max-restarts, --coordinator-args, --port, --tls-ca
// (readable), worker flags the launcher sets itself, then the node flags
// (--nnodes, --node-rank, --coordinator, --start-coordinator, the token,
// --join-timeout, --min-nodes, --rejoin-timeout).
absl::Status CheckLaunchOptions(const LaunchOptions& o);

}  // namespace psync::launch
