// Objective: the loss and the metrics of a model's output against a batch's
// targets, decided by the data's task (the trainer never names a model):
//
//   regression       MSE over every element (targets float [b, out])
//   classification   cross-entropy over classes, accuracy (targets int64 [b])
//   language model   cross-entropy at every position (logits [b, T, V],
//                    targets int64 [b, T]), i.e. nats per token
#pragma once

#include <cstdint>

#include "psync/autograd/variable.h"
#include "worker/data/dataset.h"

namespace psync::runtime {

// Mean loss of the micro-batch (shape []). grad_scale: the gradient the
// loss will receive in backward (the trainer's 1/accumulate). Cross-entropy
// is the fused classifier (autograd::FusedCrossEntropyLoss): it writes the
// logits' gradient over `output` during this call, so `output` must not be
// read afterwards.
autograd::Variable Loss(data::Task task, const autograd::Variable& output, const Tensor& targets,
                        float grad_scale = 1.0f);

// Sums over a batch for evaluation: loss summed over examples (positions
// for a language model), the count it is summed over, and correct top-1
// predictions (classification and language model; 0 for regression).
struct EvalSums {
  double loss_sum = 0;
  int64_t count = 0;
  int64_t correct = 0;
  void Add(const EvalSums& o) {
    loss_sum += o.loss_sum;
    count += o.count;
    correct += o.correct;
  }
};
EvalSums Evaluate(data::Task task, const Tensor& output, const Tensor& targets);

}  // namespace psync::runtime
