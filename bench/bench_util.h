// Small helpers shared by the C++ benchmarks in bench/ (not used by psync
// itself): summary statistics, process CPU time, and forking `world` rank
// processes with a bounded wait.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace psync::bench {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Median of v (mean of the two middle values for an even count); 0 if empty.
double Median(std::vector<double> v);

// CPU time of this process (all threads: training, communication, Gloo's
// loop), in ms: on a host whose cores are all busy, what a step costs.
double CpuMs();

// Forks `world` processes; process r runs run_rank(r, dir) and exits with
// its return value. `dir` is a fresh temporary directory (for a FileStore),
// removed afterwards. Waits at most `timeout` for all of them, then kills
// the ones still running (their number is reported on stderr with `name`).
// Returns the number of ranks that failed (non-zero exit, signal, or
// killed at the deadline); -1 when the directory or a fork failed.
int ForkRanks(const std::string& name, int world, std::chrono::seconds timeout,
              const std::function<int(int rank, const std::string& dir)>& run_rank);

}  // namespace psync::bench
