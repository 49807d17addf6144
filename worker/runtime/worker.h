// psync-worker end to end: build data, model and optimizer (bad input fails
// here, before joining), join the job (rank, process group, plans), wrap the
// model in DDP, train, save, write the summary and trace, send Done.
// Returns the process exit code (exit_codes.h, docs/cli-contract.md) after
// printing a one-line reason.
#pragma once

#include "worker/runtime/worker_flags.h"

namespace psync::runtime {

int RunWorker(const WorkerOptions& options);

}  // namespace psync::runtime
