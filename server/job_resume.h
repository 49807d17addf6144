// JobResume: coordinator failover's part of JobState (coordinator.proto,
// "Coordinator failover", "Resume"): what a Train stream's hello.resume
// does to the job. JobState's friend, called under its lock from Attach,
// so the state machine's class keeps its transitions small.
#pragma once

#include "absl/status/status.h"
#include "psync/v1/coordinator.pb.h"
#include "server/job_state.h"
#include "server/outbox.h"

namespace psync::server {

struct JobResume {
  // The first Resume a coordinator that met no job gets rebuilds the
  // running generation (Generation::Resumed); the others re-attach to it.
  // Refused: a rank that obeyed a newer epoch (fenced: the fenced hook runs
  // through `out`), a host stream, a Resume after this coordinator formed a
  // generation of its own, or one for the generation it runs itself. An
  // ended generation falls through to Attach's refusal.
  static absl::Status Resume(JobState& j, const v1::Hello& hello, Outbox* out);
};

}  // namespace psync::server
