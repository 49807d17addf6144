// Child processes of psync-launch: fork + exec in their own process group,
// non-blocking reaping, and bounded TERM -> KILL stops. The launcher forks,
// so it never starts gRPC (or any thread) itself.
//
// Threads: single-threaded use only (the launcher's main loop).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace psync::launch {

struct Child {
  std::string what;    // "coordinator", "rank 1"
  pid_t pid = -1;
  bool running = false;
  int status = 0;      // wait status, once reaped
  int exit_code = -1;  // decoded: the exit code, or 128+signal
  int64_t reaped_at = -1;  // the Reap round that found it exited (orders failures)
};

// fork + exec with its own process group; `env_add` ("NAME=value") is set in
// the child; stdout goes to `stdout_fd`, stderr to `stderr_fd` (-1 =
// inherit). Returns -1 when fork fails.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env_add, int stdout_fd,
            int stderr_fd = -1);

// The exit code (or 128 + signal) of a wait status.
int DecodeStatus(int status);
// "exit 3", "killed by signal 9 (Killed)".
std::string DescribeStatus(int status);

// Reaps finished children without blocking, stamping them with `round`;
// returns true if any changed.
bool Reap(const std::vector<Child*>& all, int64_t round = 0);
// `sig` to the whole process group of every running child.
void SignalAll(const std::vector<Child*>& children, int sig);
// Waits until every child exited or `limit` passed; true if all exited.
bool WaitAll(const std::vector<Child*>& children, std::chrono::milliseconds limit);
// SIGTERM, up to `term_wait`, SIGKILL, up to 5 s: bounded.
void StopAll(const std::vector<Child*>& children, std::chrono::milliseconds term_wait);
// Runs a short helper (psyncctl) to completion within `limit`, stdout to
// /dev/null; returns its exit code, or -1.
int RunBounded(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
               std::chrono::milliseconds limit);

}  // namespace psync::launch
