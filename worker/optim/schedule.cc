#include "psync/optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace psync::optim {

absl::StatusOr<LrSchedule> LrSchedule::Create(const std::string& kind, double lr, int64_t warmup_steps,
                                              int64_t total_steps) {
  Kind k;
  if (kind == "constant") {
    k = Kind::kConstant;
  } else if (kind == "cosine") {
    k = Kind::kCosine;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr-schedule must be 'constant' or 'cosine', got '", kind, "'"));
  }
  if (!(lr >= 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(absl::StrCat("--lr must be a finite value >= 0, got ", lr));
  }
  if (warmup_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--warmup-steps must be >= 0, got ", warmup_steps));
  }
  if (total_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--steps must be >= 1 for a schedule, got ", total_steps));
  }
  return LrSchedule(k, lr, warmup_steps, total_steps);
}

double LrSchedule::At(int64_t s) const {
  const double lr = lr_;
  if (s < warmup_) return lr * static_cast<double>(s + 1) / static_cast<double>(warmup_);
  if (kind_ == Kind::kConstant) return lr;
  const double lr_min = 0.1 * lr;
  const int64_t span = std::max<int64_t>(1, total_ - warmup_);
  const int64_t progress = std::min(s - warmup_, span);  // past the end: stay at lr_min
  constexpr double pi = 3.141592653589793;  // math.pi
  return lr_min +
         0.5 * (1 + std::cos(pi * static_cast<double>(progress) / static_cast<double>(span))) * (lr - lr_min);
}

}  // namespace psync::optim
