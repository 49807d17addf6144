// The one place an exception becomes an absl::Status. Tensor code, autograd
// nodes, hooks and callbacks report errors by throwing; every module
// boundary that runs such code catches and converts here, so one exception
// gets the same code wherever it is caught:
//   an exception that names its code (StatusError: TensorError is
//   InvalidArgument, autograd's GraphFreedError FailedPrecondition)   that code
//   InternalError (PSYNC_CHECK: a broken invariant)                   Internal
//   any other std::exception (std::bad_alloc, a CUDA error, ...)      `fallback`
//   anything else                                                     `fallback`, "unknown exception"
// The message is "<where>: <what>" ("<what>" when `where` is empty).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace psync {

// An exception that says which absl::StatusCode it stands for.
class StatusError : public std::runtime_error {
 public:
  StatusError(absl::StatusCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  absl::StatusCode code() const noexcept { return code_; }

 private:
  absl::StatusCode code_;
};

// Call inside a catch block (any: it rethrows the exception being handled
// to look at it).
absl::Status StatusFromException(absl::string_view where,
                                 absl::StatusCode fallback = absl::StatusCode::kInternal);

// Runs `fn` (returning void) and turns what it throws into a Status.
template <typename Fn>
absl::Status RunCatching(absl::string_view where, Fn&& fn,
                         absl::StatusCode fallback = absl::StatusCode::kInternal) {
  try {
    std::forward<Fn>(fn)();
    return absl::OkStatus();
  } catch (...) {
    return StatusFromException(where, fallback);
  }
}

}  // namespace psync
