#include "psync/nn/embedding.h"

#include "psync/common/logging.h"
#include "psync/autograd/nn_functions.h"

namespace psync::nn {

Embedding::Embedding(Tensor weight) {
  PSYNC_CHECK(weight.dim() == 2) << "Embedding weight must be [num, dim], got " << weight.DebugString();
  weight_ = RegisterParameter("weight", std::move(weight));
}

Variable Embedding::Forward(const Variable& ids) { return autograd::Embedding(ids.data(), weight_); }

}  // namespace psync::nn
