#include "psync/common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace psync {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};

char LevelChar(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarning: return 'W';
    case LogLevel::kError: return 'E';
  }
  return '?';
}

const char* Basename(const char* path) {
  const char* b = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/') b = p + 1;
  return b;
}
}  // namespace

void SetLogRank(int rank) { g_rank.store(rank); }
void SetMinLogLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(g_min_level.load()); }

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm;
  localtime_r(&t, &tm);
  char ts[32];
  std::snprintf(ts, sizeof(ts), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  stream_ << "[psync " << LevelChar(level) << ' ' << ts;
  int rank = g_rank.load();
  if (rank >= 0) stream_ << " rank=" << rank;
  if (level_ != LogLevel::kInfo) stream_ << ' ' << Basename(file) << ':' << line;
  stream_ << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string s = stream_.str();
  // One write() per line so lines from threads and processes do not interleave.
  ssize_t unused = ::write(STDERR_FILENO, s.data(), s.size());
  (void)unused;
}

CheckFailure::CheckFailure(const char* cond, const char* file, int line) {
  stream_ << "internal check failed at " << Basename(file) << ':' << line << ": " << cond << ' ';
}

CheckFailure::~CheckFailure() noexcept(false) { throw InternalError(stream_.str()); }

}  // namespace internal
}  // namespace psync
