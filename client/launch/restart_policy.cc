#include "client/launch/restart_policy.h"

#include <tuple>

namespace psync::launch {
namespace {

// "--name" or "--name=..." (Abseil also accepts underscores for dashes).
bool IsFlag(const std::string& arg, const std::string& dashed) {
  std::string underscored = dashed;
  for (size_t i = 2; i < underscored.size(); ++i) {
    if (underscored[i] == '-') underscored[i] = '_';
  }
  for (const std::string& name : {dashed, underscored}) {
    if (arg == name || arg.rfind(name + "=", 0) == 0) return true;
  }
  return false;
}

}  // namespace

bool IsConsequence(int exit_code) { return exit_code == 4 || exit_code == 5; }

std::optional<WorkerEnd> FirstFailure(const std::vector<WorkerEnd>& ends) {
  std::optional<WorkerEnd> best;
  auto key = [](const WorkerEnd& e) { return std::make_tuple(e.reaped_at, IsConsequence(e.exit_code), e.rank); };
  for (const WorkerEnd& e : ends) {
    if (e.exit_code == 0) continue;
    if (!best || key(e) < key(*best)) best = e;
  }
  return best;
}

RestartDecision Decide(const WorkerEnd& failure, int restarts_done, int max_restarts, bool stopping) {
  if (stopping) return RestartDecision::kStopping;
  if (restarts_done >= max_restarts) return RestartDecision::kNoRestartsLeft;
  // 2: bad flags or input; 126/127: the program could not be started
  // (child_process.cc, as a shell says it). Either fails the same way again.
  if (failure.exit_code == 2 || failure.exit_code == 126 || failure.exit_code == 127) {
    return RestartDecision::kNotRetriable;
  }
  return RestartDecision::kRestart;
}

std::vector<std::string> WorkerFlagsFor(const std::vector<std::string>& user_flags, int restart, bool* added_resume) {
  std::vector<std::string> out = user_flags;
  bool has_dir = false, has_resume = false;
  for (const std::string& f : user_flags) {
    has_dir = has_dir || IsFlag(f, "--checkpoint-dir");
    has_resume = has_resume || IsFlag(f, "--resume") || IsFlag(f, "--noresume");
  }
  // Why only with --checkpoint-dir: --resume means "from the newest
  // checkpoint in --checkpoint-dir"; without one there is nothing to resume
  // and a worker that lacks the flag would refuse it (exit 2).
  const bool add = restart > 0 && has_dir && !has_resume;
  if (add) out.push_back("--resume");
  if (added_resume) *added_resume = add;
  return out;
}

}  // namespace psync::launch
