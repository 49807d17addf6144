// LaunchOptions: what psync-launch was asked to run (its flags, resolved:
// the token and TLS CA with their environment fallbacks, the executables
// found), and the checks that refuse a bad combination before anything
// starts. docs/cli-contract.md ("psync-launch") is the user-facing list.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace psync::launch {

struct LaunchOptions {
  int nproc = 0;                      // local workers, ranks 0..nproc-1
  int port = 0;                       // the coordinator's port (0 = a free one)
  std::string host = "127.0.0.1";     // the coordinator binds here (0.0.0.0: reached at 127.0.0.1)
  std::string job_id = "psync";
  std::string token;                  // empty: the launcher makes one for the job
  std::string tls_ca;                 // PEM CA the workers and psyncctl trust (empty = plaintext)
  std::vector<std::string> coordinator_args;  // extra psync-coordinator flags
  std::chrono::milliseconds grace{30000};     // after a stop request or a failed worker, before SIGTERM
  bool relay = true;                  // psync-relay for the host's ranks (only with nproc > 1)
  bool all_output = false;            // every rank's stdout, not only rank 0's
  int max_restarts = 0;               // restarts of every worker after a failure (restart_policy.h)
  std::vector<std::string> worker_flags;  // after a bare `--`, to every worker

  // Executables (find_binary.h); an empty psyncctl_bin means none was found
  // (Ctrl-C then stops the workers with SIGTERM), an empty relay_bin that
  // the relay is not used.
  std::string coordinator_bin, worker_bin, relay_bin, psyncctl_bin;

  // Why only with several ranks: one rank has one stream either way.
  bool UseRelay() const { return relay && nproc > 1; }
};

// InvalidArgument naming the flag (psync-launch exits 2), checked in this
// order: --nproc, --max-restarts, --coordinator-args, --port, --tls-ca
// (readable), worker flags the launcher sets itself.
absl::Status CheckLaunchOptions(const LaunchOptions& o);

}  // namespace psync::launch
