// Learning-rate schedules (--lr-schedule, --warmup-steps, --lr, --steps).
// For step s (0-based) of K total, peak rate lr, warmup W:
//   s < W:      lr * (s + 1) / W                            (both kinds)
//   constant:   lr
//   cosine:     lr_min + 0.5 * (1 + cos(pi * (s - W) / max(1, K - W))) * (lr - lr_min),
//               lr_min = 0.1 * lr; for s >= K it stays at lr_min
// evaluated in double in exactly this order (a Python reference computing
// the same expression gets the same bits).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace psync::optim {

class LrSchedule {
 public:
  enum class Kind { kConstant, kCosine };

  // kind: "constant" or "cosine". lr finite and >= 0; warmup_steps >= 0;
  // total_steps >= 1. Errors name the flag.
  static absl::StatusOr<LrSchedule> Create(const std::string& kind, double lr, int64_t warmup_steps,
                                           int64_t total_steps);

  // The rate for step s >= 0.
  double At(int64_t s) const;

  Kind kind() const { return kind_; }
  double peak() const { return lr_; }
  int64_t warmup_steps() const { return warmup_; }
  int64_t total_steps() const { return total_; }

 private:
  LrSchedule(Kind kind, double lr, int64_t warmup, int64_t total)
      : kind_(kind), lr_(lr), warmup_(warmup), total_(total) {}
  Kind kind_;
  double lr_;
  int64_t warmup_, total_;
};

}  // namespace psync::optim
