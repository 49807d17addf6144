// Exit codes as status payloads (include/psync/common/exit_code.h), Annotate keeping them
// (include/psync/common/status_macros.h), and the one conversion of exceptions
// (include/psync/common/status_from_exception.h).
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "psync/common/exit_code.h"
#include "psync/common/logging.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"

namespace psync {
namespace {

TEST(ExitCode, CarriedAsAPayloadThroughAnnotate) {
  const absl::Status plain = absl::UnavailableError("x");
  EXPECT_FALSE(ExitCodeIn(plain).has_value());
  EXPECT_EQ(ExitCodeOf(plain, kExitInternal), kExitInternal);
  absl::Status tagged = WithExitCode(absl::UnavailableError("coordinator lost"), kExitCoordinatorLost);
  EXPECT_EQ(ExitCodeOf(tagged, kExitInternal), kExitCoordinatorLost);
  const absl::Status annotated = Annotate(tagged, "iteration 3");
  EXPECT_EQ(annotated.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(annotated.message(), "iteration 3: coordinator lost");
  EXPECT_EQ(ExitCodeOf(annotated, kExitInternal), kExitCoordinatorLost) << "Annotate keeps the payload";
  EXPECT_EQ(ExitCodeOf(WithExitCode(tagged, kExitPeerLost), 0), kExitPeerLost) << "a new tag replaces the old";
}

struct NamedError : StatusError {
  NamedError() : StatusError(absl::StatusCode::kFailedPrecondition, "graph freed") {}
};

TEST(StatusFromException, EachKindOfExceptionGetsOneCode) {
  auto from = [](auto thrower, absl::StatusCode fallback) {
    return RunCatching("backward of x", thrower, fallback);
  };
  absl::Status named = from([] { throw NamedError(); }, absl::StatusCode::kUnknown);
  EXPECT_EQ(named.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(named.message(), "backward of x: graph freed");
  absl::Status check = from([] { throw InternalError("check failed: n > 0"); }, absl::StatusCode::kUnknown);
  EXPECT_EQ(check.code(), absl::StatusCode::kInternal);
  absl::Status other = from([] { throw std::bad_alloc(); }, absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(other.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(from([] { throw std::runtime_error("boom"); }, absl::StatusCode::kInternal).message(),
            "backward of x: boom");
  absl::Status unknown = from([] { throw 42; }, absl::StatusCode::kUnknown);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(unknown.message(), "backward of x: unknown exception");
  EXPECT_TRUE(from([] {}, absl::StatusCode::kInternal).ok());
  try {
    throw std::runtime_error("no context");
  } catch (...) {
    EXPECT_EQ(StatusFromException("").message(), "no context");
  }
}

}  // namespace
}  // namespace psync
