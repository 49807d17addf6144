// SessionOptions: how a worker joins its job (the coordinator's address,
// its rank, the job id, the backend, the fingerprint every rank must share);
// StartOffer: where it can start. psync-worker fills them from its flags
// (docs/cli-contract.md); a program with its own loop fills them itself and
// passes them to psync::Job::Join (psync/control/job.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "psync/common/bucket_packer.h"

namespace psync::control {

// What the session needs from psync-worker's flags (docs/cli-contract.md).
struct SessionOptions {
  std::string coordinator = "127.0.0.1:29500";  // HOST:PORT
  std::string token;
  std::string tls_ca;           // PEM CA file; empty = plaintext
  std::string plan_relay;       // this host's psync-relay (HOST:PORT); empty = none
  std::string gloo_host;        // empty = derived from the coordinator's address (gloo_host.h)
  std::string job_id = "psync";
  int rank = -1;                // -1 = any
  int world_size = 0;           // 0 = the coordinator's
  int local_world_size = 0;     // LOCAL_WORLD_SIZE; 0 = unknown (only checked against the host ids)
  std::string backend = "auto";  // --backend, as requested: every rank must ask for the same
  BucketCaps bucket_caps;       // as the reducer will use them: every rank must send the same
  std::chrono::milliseconds timeout{30000};  // connecting, collectives of the group
  // Coordinator failover: how long the session rides through a lost
  // coordinator (trains on while its plans last, reconnects, re-registers
  // with the one that comes back) before the job fails with exit code 5;
  // 0 = at once. Join also retries an unreachable coordinator this long.
  std::chrono::milliseconds coordinator_grace{60000};
  int64_t global_batch = 0;     // JoinRequest.global_batch (0 = not said)
  // JoinRequest.settings: the job's fingerprint (psync-worker's:
  // runtime/job_fingerprint.h); every rank must send the same.
  std::vector<std::pair<std::string, std::string>> settings;
};

// Where this rank can start (JoinRequest.start_iteration / agree_resume /
// checkpoint_steps): its own iteration, or (`agree`) the checkpoints it can
// load, of which the coordinator picks the newest every rank can load.
struct StartOffer {
  int64_t start_iteration = 0;  // without `agree`: this rank's first iteration
  bool agree = false;
  std::vector<int64_t> checkpoint_steps;  // with `agree`
  // Live recovery (docs/cli-contract.md, --recovery): a process that
  // survived the previous generation and rejoins in-process says which
  // (`generation`, from the ABORT plan) and how many steps its in-memory
  // state has completed (`live_step`); the coordinator starts at the newest
  // live step and names a rank to heal the others from
  // (JobSession::heal_source). Both unset for a fresh process.
  int64_t generation = 0;
  std::optional<int64_t> live_step;
};

}  // namespace psync::control
