#include "worker/runtime/objective.h"

#include <vector>

#include "psync/autograd/functions.h"
#include "psync/autograd/view_functions.h"
#include "psync/tensor/ops.h"

namespace psync::runtime {

namespace {
// Logits [..., C] as rows [n, C] and their targets as [n].
void AsRows(const Tensor& output, const Tensor& targets, Tensor* logits, Tensor* flat_targets) {
  *logits = output.Reshape({-1, output.size(-1)});
  *flat_targets = targets.Reshape({-1});
}
}  // namespace

autograd::Variable Loss(data::Task task, const autograd::Variable& output, const Tensor& targets,
                        float grad_scale) {
  const Tensor t = targets.To(output.data().device());
  if (task == data::Task::kRegression) return autograd::MseLoss(output, autograd::Variable(t));
  const int64_t classes = output.data().size(-1);
  return autograd::FusedCrossEntropyLoss(autograd::Reshape(output, {-1, classes}), t.Reshape({-1}), grad_scale);
}

EvalSums Evaluate(data::Task task, const Tensor& output, const Tensor& targets) {
  EvalSums s;
  const Tensor t = targets.To(output.device());
  if (task == data::Task::kRegression) {
    Tensor diff = ops::Sub(output, t);
    s.count = output.size(0);
    // Per-example MSE summed: mean over elements times rows.
    s.loss_sum = static_cast<double>(ops::Mean(ops::Mul(diff, diff)).Item()) * static_cast<double>(s.count);
    return s;
  }
  Tensor logits, flat;
  AsRows(output, t, &logits, &flat);
  s.count = logits.size(0);
  s.loss_sum = static_cast<double>(ops::CrossEntropy(logits, flat).Item()) * static_cast<double>(s.count);
  // Top-1 on the host (evaluation only).
  const std::vector<float> v = logits.To(kFloat32).ToVector();  // bf16 logits in a bf16 step
  const std::vector<int64_t> y = flat.ToVector<int64_t>();
  const int64_t classes = logits.size(1);
  for (int64_t i = 0; i < s.count; ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (v[static_cast<size_t>(i * classes + c)] > v[static_cast<size_t>(i * classes + best)]) best = c;
    }
    s.correct += best == y[static_cast<size_t>(i)] ? 1 : 0;
  }
  return s;
}

}  // namespace psync::runtime
