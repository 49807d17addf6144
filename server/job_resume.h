// JobResume: coordinator failover's part of JobState (coordinator.proto,
// "Coordinator failover", "Resume"): what a Train stream's hello.resume
// does to the job. JobState's friend, called under its lock from Attach,
// so the state machine's class keeps its transitions small.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "psync/v1/coordinator.pb.h"
#include "server/job_state.h"
#include "server/outbox.h"

namespace psync::server {

struct JobResume {
  // Runs (never with JobState's lock held) when a worker resumes with a
  // newer epoch than this coordinator's: a newer coordinator drives the
  // job, so this one must go (`why` names both epochs). Set before serving.
  static void SetFencedHook(JobState& j, std::function<void(const std::string& why)> hook);
  // The first Resume a coordinator that met no job gets rebuilds the
  // running generation (Generation::Resumed); the others re-attach to it.
  // Refused: a rank that obeyed a newer epoch (fenced: the fenced hook runs
  // through `out`), a host stream, a Resume after this coordinator formed a
  // generation of its own, or one for the generation it runs itself. An
  // ended generation falls through to Attach's refusal.
  // A rank of the running generation whose stream broke (this coordinator
  // ran on, or was paused) re-attaches (Generation::Reattach) ...
  static absl::Status Resume(JobState& j, const v1::Hello& hello, Outbox* out);
  // ... and, once attached, gets the plans it missed.
  static void Reattached(JobState& j, const v1::Hello& hello, Outbox* out);
  // The liveness ticker ran at `now` (real time). A gap beyond the
  // heartbeat timeout since its last run means this coordinator did not
  // run: no rank's silence in it counts (Generation::Forgive), and streams
  // that break until one heartbeat timeout later are held (HoldForReattach).
  // Ranks held that did not re-attach by then are lost together.
  static void Ticked(JobState& j, JobState::Clock::time_point now, Outbox* out);
  // True when a newer coordinator took this one's --state-dir (the lease,
  // JobJournal::SetLeaseCheck): no plan may go out, and the fenced hook
  // runs (once, through `out`).
  static bool Fenced(JobState& j, Outbox* out);
  // The journal kept a shutdown (JobJournal::Restore) that the resumed
  // workers do not hold: it is asked again, from their next plan on.
  static void AskPendingStop(JobState& j);
  // DisconnectLocked: true = `training`'s streams broke while this
  // coordinator was paused; they stay training, unattached, until they
  // re-attach or their silence loses them.
  static bool HoldForReattach(JobState& j, const std::vector<int>& training);
};

}  // namespace psync::server
