// The optimizers --optimizer chooses from (include/psync/common/registry.h):
//
//   PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<optim::Optimizer> opt,
//                          optim::Optimizers().Create(flags.optimizer, {model->named_parameters(), options}));
//
// Each factory validates the parameters and the options it uses, and an
// error names the parameter or the flag.
#pragma once

#include "psync/common/registry.h"
#include "psync/optim/optimizer.h"

namespace psync::optim {

struct OptimizerArgs {
  NamedParams params;  // (name, parameter) in registration order
  OptimizerOptions options;
};

// "sgd", "adamw".
const Registry<Optimizer, OptimizerArgs>& Optimizers();

}  // namespace psync::optim
