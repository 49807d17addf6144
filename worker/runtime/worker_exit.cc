#include "worker/runtime/worker_exit.h"

#include <optional>

#include "absl/strings/str_cat.h"

namespace psync::runtime {

WorkerExit ExitFor(const absl::Status& st, int phase_default) {
  WorkerExit out;
  out.code = ExitCodeOf(st, phase_default);
  out.reason = std::string(st.message());
  return out;
}

WorkerExit FailedIteration(const absl::Status& st, const absl::Status& control_failure, int64_t iteration,
                           absl::string_view where) {
  WorkerExit out;
  const std::string at = absl::StrCat(" at iteration ", iteration, ": ");
  if (!control_failure.ok()) {
    out.code = ExitCodeOf(control_failure, kExitCoordinatorLost);
    out.reason = absl::StrCat(out.code == kExitPeerLost ? "job aborted" : "coordinator lost", at,
                              std::string(control_failure.message()));
    return out;
  }
  const std::string failed = absl::StrCat("iteration ", iteration, " failed in ", where);
  if (std::optional<int> code = ExitCodeIn(st)) {
    out.code = *code;
    out.reason = absl::StrCat(failed, ": ", std::string(st.message()));
  } else if (st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kDeadlineExceeded ||
             st.code() == absl::StatusCode::kAborted) {
    out.code = kExitPeerLost;
    out.reason = absl::StrCat(failed, " (a peer was lost?): ", std::string(st.message()));
  } else {
    out.code = kExitInternal;
    out.reason = absl::StrCat(failed, ": ", std::string(st.message()));
  }
  return out;
}

}  // namespace psync::runtime
