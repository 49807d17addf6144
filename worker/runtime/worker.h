// psync-worker end to end: validate input, Join the coordinator, build the
// process group (Gloo on CPU, NCCL on CUDA) through the coordinator's store,
// wrap the model in DDP, train, save, write the summary and trace, send Done.
// Returns the process exit code (docs/cli-contract.md) after printing a
// one-line reason.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "worker/runtime/worker_flags.h"

namespace psync::runtime {

int RunWorker(const WorkerOptions& options);

// The address Gloo should bind to for a coordinator at `coordinator`
// (HOST:PORT): 127.0.0.1 when the coordinator is on loopback, else the local
// address of a socket connected towards it.
absl::StatusOr<std::string> DeriveGlooHost(const std::string& coordinator);

}  // namespace psync::runtime
