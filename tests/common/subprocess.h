// Child processes for tests, always bounded: a child still running at its
// deadline is SIGKILLed and reaped, so a test never hangs on one.
//
// RunRanks forks: only for test binaries that never started gRPC (or any
// other threads the children would need). Children must use fresh state; each
// ends with _exit so gtest's state in the child never runs. Binaries that run
// gRPC spawn other programs with SpawnAndCapture (posix_spawn) instead.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace psync::test_support {

// ChildResult::code when the child was still running at the deadline.
inline constexpr int kKilledAtDeadline = -1000;
// ChildResult::code when fork() failed.
inline constexpr int kForkFailed = -2000;

// Result of one child: exit code, or -signal when killed by a signal, or one
// of the k* codes above.
struct ChildResult {
  int code = 0;
  bool ok() const { return code == 0; }
};

// Forks `n` children running fn(rank) (an uncaught exception is exit 99);
// waits for all of them up to `deadline`, then SIGKILLs and reaps the rest.
std::vector<ChildResult> RunRanks(int n, const std::function<int(int)>& fn, std::chrono::milliseconds deadline);

// EXPECT_EQ(code, 0) for every rank, naming the rank.
void ExpectAllRanksOk(const std::vector<ChildResult>& results);

// Runs argv[0] (a path, or a name looked up on PATH) with argv, stdout and stderr together into `output`.
// code: the exit status; -1 when it could not be started, was killed by a
// signal, or was killed at `deadline` (then timed_out is true).
struct SpawnResult {
  int code = -1;
  bool timed_out = false;
  std::string output;
};
SpawnResult SpawnAndCapture(const std::vector<std::string>& argv,
                            std::chrono::milliseconds deadline = std::chrono::milliseconds(60000));

}  // namespace psync::test_support

// Inside a child (a function returning the child's exit code): on failure,
// print rank, place, condition and `msg` to stderr and return 1.
#define CHILD_CHECK(rank, cond, msg)                                                                        \
  do {                                                                                                      \
    if (!(cond)) {                                                                                          \
      std::fprintf(stderr, "rank %d: CHECK failed at %s:%d: %s -- %s\n", (rank), __FILE__, __LINE__, #cond, \
                   std::string(msg).c_str());                                                               \
      return 1;                                                                                             \
    }                                                                                                       \
  } while (0)
