// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_
// (norm_type 2): over every parameter that has a grad,
//   norm = sqrt(sum of g^2 over all of them)
//   g *= min(1, max_norm / (norm + 1e-6))      (in place; skipped when 1)
// The norm is computed in double in a fixed order (each grad's sum of
// squares by ops::SumOfSquares, the same bits on CPU and CUDA; then the
// per-parameter sums in registration order), so every rank with the same
// averaged grads gets the same norm and coefficient. The coefficient is
// computed in double and rounded to float once; torch computes the norm and
// the coefficient in float32, so results agree to float32 round-off, not
// bitwise. Grads are scaled in place: DDP bucket views stay views.
//
// Threads: the training thread only.
#pragma once

#include "absl/status/statusor.h"
#include "psync/optim/optimizer.h"

namespace psync::optim {

// Returns the norm before clipping (0 when no parameter has a grad).
// max_norm must be > 0 (--clip-grad-norm=0 means: do not call this). Grads
// must share one device; an error names the parameter.
absl::StatusOr<double> ClipGradNorm(const NamedParams& params, double max_norm);

// The norm alone, without scaling anything (same computation).
absl::StatusOr<double> GradNorm(const NamedParams& params);

}  // namespace psync::optim
