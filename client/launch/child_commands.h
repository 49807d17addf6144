// The command lines and environments psync-launch starts its children with:
// the coordinator, the host's psync-relay, each worker, and psyncctl
// (shutdown; status, for a node following its job). Pure functions of the options, so what every child gets is
// unit-tested without processes. The token always goes in the environment,
// never on a command line (ps shows those).
#pragma once

#include <string>
#include <vector>

#include "client/launch/launch_options.h"

namespace psync::launch {

struct Command {
  std::vector<std::string> argv;  // argv[0] is the executable's path
  std::vector<std::string> env;   // "NAME=value", added to the launcher's environment
};

// Where a generation's workers reach the job.
struct JobAddress {
  std::string coordinator;  // HOST:PORT
  int port = 0;             // the coordinator's port (MASTER_PORT)
  std::string relay;        // 127.0.0.1:PORT of psync-relay, empty without one
};

// One worker's place in the job (torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE).
struct RankSlot {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
};

// Local rank `local` of this node: global rank o.FirstRank() + local of
// o.WorldSize(), local world o.nproc.
RankSlot NodeSlot(const LaunchOptions& o, int local);

// psync-coordinator on o.host:o.port for a world of o.WorldSize(), writing
// its port to `port_file` and its journal to `state_dir` (one started again
// keeps the restart count, a shutdown asked for, the events); restartable
// with o.max_restarts; in node mode with o.join_timeout.
Command CoordinatorCommand(const LaunchOptions& o, const std::string& port_file, const std::string& state_dir);
// psync-relay for the o.nproc local ranks, writing its port to `port_file`.
Command RelayCommand(const LaunchOptions& o, const std::string& coordinator, const std::string& port_file);
// A worker of generation `restart` (0 = the first start) with `flags`
// (the user's, from WorkerFlagsFor) and the launcher's own; PSYNC_HOST_ID
// when o.host_id is set.
Command WorkerCommand(const LaunchOptions& o, const JobAddress& at, const std::vector<std::string>& flags,
                      const RankSlot& slot, int restart);
// psyncctl shutdown: every worker stops after the same iteration.
Command ShutdownCommand(const LaunchOptions& o, const std::string& coordinator);
// psyncctl --json status: the job as the coordinator sees it (coordinator_view.h).
// psyncctl regroup: an elastic job that runs without some nodes takes this
// one in at its next generation.
Command RegroupCommand(const LaunchOptions& o, const std::string& coordinator, const std::string& reason);
Command StatusCommand(const LaunchOptions& o, const std::string& coordinator);

}  // namespace psync::launch
