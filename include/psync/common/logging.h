// Minimal leveled logging for psync (abseil 20220623 has no absl/log).
//
//   PSYNC_LOG(INFO) << "joined as rank " << rank;
//   PSYNC_CHECK(cond) << "context";   // throws psync::InternalError, never aborts
//
// Lines go to stderr as "[psync I 12:00:00.123 rank=1] message". The rank tag
// is set once per process with SetLogRank(). Thread-safe: each line is
// written with a single write() call.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace psync {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Process-wide settings; call from main() before threads start.
void SetLogRank(int rank);
void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();

// Thrown by PSYNC_CHECK: a broken internal invariant (a bug), not bad user
// input. Module boundaries catch it and turn it into an absl::Status.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace internal {

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Collects the message of a failed check and throws on destruction.
class CheckFailure {
 public:
  CheckFailure(const char* cond, const char* file, int line);
  ~CheckFailure() noexcept(false);
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace psync

#define PSYNC_LOG_LEVEL_DEBUG ::psync::LogLevel::kDebug
#define PSYNC_LOG_LEVEL_INFO ::psync::LogLevel::kInfo
#define PSYNC_LOG_LEVEL_WARNING ::psync::LogLevel::kWarning
#define PSYNC_LOG_LEVEL_ERROR ::psync::LogLevel::kError

#define PSYNC_LOG(level)                                              \
  !(PSYNC_LOG_LEVEL_##level >= ::psync::MinLogLevel())                \
      ? (void)0                                                       \
      : ::psync::internal::Voidify() &                                \
            ::psync::internal::LogMessage(PSYNC_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

#define PSYNC_CHECK(cond)                         \
  (cond) ? (void)0                                \
         : ::psync::internal::Voidify() &         \
               ::psync::internal::CheckFailure(#cond, __FILE__, __LINE__).stream()
