#include "worker/comm/store.h"

#include "absl/strings/str_cat.h"
#include "worker/comm/util.h"

namespace psync::comm {

// Default Wait: Get each key in turn with the time that is left. On a
// timeout, names every key not yet seen (the one that timed out and all
// after it), since Get gives no cheap existence check.
absl::Status Store::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    absl::StatusOr<std::string> v = Get(keys[i], left);
    if (!v.ok()) {
      if (v.status().code() == absl::StatusCode::kDeadlineExceeded) {
        std::vector<std::string> missing(keys.begin() + static_cast<long>(i), keys.end());
        return absl::DeadlineExceededError(
            absl::StrCat("store wait timed out after ", internal::FormatDuration(timeout),
                         "; missing key(s): ", internal::QuoteJoin(missing)));
      }
      return v.status();
    }
  }
  return absl::OkStatus();
}

}  // namespace psync::comm
