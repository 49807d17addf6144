// The option structs each part of psync-worker takes, built once from the
// command line (WorkerOptions, worker_flags.h): the trainer, the job session,
// checkpointing and the model builder never see the whole command line.
#pragma once

#include "worker/control/job_session.h"
#include "psync/optim/optimizer.h"
#include "worker/runtime/checkpointing.h"
#include "worker/runtime/model_builder.h"
#include "worker/runtime/train_options.h"
#include "worker/runtime/worker_flags.h"

namespace psync::runtime {

TrainOptions TrainOptionsFrom(const WorkerOptions& opt);
control::SessionOptions SessionOptionsFrom(const WorkerOptions& opt);
CheckpointOptions CheckpointOptionsFrom(const WorkerOptions& opt);
ModelSpec ModelSpecFrom(const WorkerOptions& opt);
optim::OptimizerOptions OptimizerOptionsFrom(const WorkerOptions& opt);

}  // namespace psync::runtime
