// psync's public API, all of it: #include <psync/psync.h>, link psync::psync
// (find_package(psync) from an installed prefix or the Debian package).
//
// Three levels, from the top:
//   Bring your model   register a model with its own flags (nn/models/registry.h)
//                      and return runtime::WorkerMain(argc, argv): the program is
//                      a psync-worker (docs/guide-your-model.md, examples/llama).
//   Bring your loop    control::Job joins a job (rank, world, process group from
//                      the coordinator), wraps a module in DistributedDataParallel
//                      and follows the coordinator's plans and stops; forward,
//                      backward and the optimizer are yours (examples/custom_loop).
//   Your own ops       autograd::FunctionNode for a differentiable function with
//                      its own backward, autograd::GradCheck to check it.
// Below them: tensors and their ops (CPU and CUDA), autograd, nn modules and
// layers, optimizers, process groups. Errors are absl::Status (status_macros.h:
// PSYNC_RETURN_IF_ERROR, PSYNC_ASSIGN_OR_RETURN); nothing aborts on bad input.
#pragma once

#include "psync/version.h"

#include "psync/common/exit_code.h"
#include "psync/common/logging.h"
#include "psync/common/status_macros.h"

#include "psync/tensor/device.h"
#include "psync/tensor/dtype.h"
#include "psync/tensor/ops.h"
#include "psync/tensor/tensor.h"

#include "psync/autograd/engine.h"
#include "psync/autograd/function_node.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/grad_mode.h"
#include "psync/autograd/gradcheck.h"
#include "psync/autograd/nn_functions.h"
#include "psync/autograd/variable.h"
#include "psync/autograd/view_functions.h"

#include "psync/nn/conv2d.h"
#include "psync/nn/embedding.h"
#include "psync/nn/init.h"
#include "psync/nn/layer_norm.h"
#include "psync/nn/layers.h"
#include "psync/nn/loss.h"
#include "psync/nn/models/model.h"
#include "psync/nn/models/registry.h"
#include "psync/nn/module.h"
#include "psync/nn/state_dict.h"

#include "psync/optim/adamw.h"
#include "psync/optim/clip.h"
#include "psync/optim/optimizer.h"
#include "psync/optim/registry.h"
#include "psync/optim/schedule.h"
#include "psync/optim/sgd.h"

#include "psync/comm/process_group.h"

#include "psync/ddp/comm_hook.h"
#include "psync/ddp/ddp.h"
#include "psync/ddp/no_sync.h"
#include "psync/ddp/training_optimizer.h"

#include "psync/control/job.h"
#include "psync/runtime/worker_main.h"
