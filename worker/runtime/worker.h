// psync-worker end to end: build data, model and optimizer (bad input fails
// here, before joining), join the job (control/job_session.h: rank, process
// group, plans), wrap the model in DDP, train, save, write the summary and
// trace, send Done. Returns the process exit code (worker_exit.h decides it,
// docs/cli-contract.md lists them) after printing a one-line reason, the
// last line on stderr: "psync-worker rank R: <reason>".
#pragma once

#include "worker/runtime/worker_flags.h"

namespace psync::runtime {

int RunWorker(const WorkerOptions& options);

}  // namespace psync::runtime
