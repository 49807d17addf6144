// Loss functions (thin, so models and tests read like PyTorch code).
#pragma once

#include "psync/autograd/functions.h"
#include "psync/nn/module.h"

namespace psync::nn {

// mean((pred - target)^2) over all elements -> shape [].
inline Variable MseLoss(const Variable& pred, const Variable& target) { return autograd::MseLoss(pred, target); }
inline Variable MseLoss(const Variable& pred, const Tensor& target) {
  return autograd::MseLoss(pred, Variable(target));
}

// logits [N,C], targets [N] int64 class indices; mean over rows -> [].
inline Variable CrossEntropyLoss(const Variable& logits, const Tensor& targets) {
  return autograd::CrossEntropyLoss(logits, targets);
}

}  // namespace psync::nn
