// How psync-worker ends: the exit code and the one-line reason, decided
// here for every failure (docs/cli-contract.md, include/psync/common/exit_code.h).
//
// An error carries its exit code from the module that knew the cause
// (WithExitCode: the coordinator client, the plan mailbox, the job session,
// the DDP step check, checkpointing); what carries none is decided by the
// phase it happened in:
//   before joining the job (flags, data, model, --init, --resume)   2 bad input
//   joining (coordinator, peers, process group, DDP set-up)          3 rendezvous
//   a training iteration: FailedIteration below
//   anything else                                                    1 internal
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "psync/common/exit_code.h"

namespace psync::runtime {

struct WorkerExit {
  int code = kExitOk;
  std::string reason;  // one line
  int rank = -1;       // once known (requested, or assigned by Join); -1 = unknown
};

// The code `st` carries, else `phase_default`; the reason is its message.
WorkerExit ExitFor(const absl::Status& st, int phase_default);

// A training iteration failed with `st` in `where` (e.g. "forward/backward").
// `control_failure` is why the coordinator's plans stopped (the plan
// mailbox's failure, OK if none):
//   the plans stopped                            its code: 4 "job aborted at iteration N: ..." or
//                                                5 "coordinator lost at iteration N: ..."
//   `st` carries a code (a rank out of step: 4,  that code, "iteration N failed in WHERE: ..."
//   bad data: 2, a checkpoint write: 1)
//   a collective failed (Unavailable,            4, "iteration N failed in WHERE (a peer was lost?): ..."
//   DeadlineExceeded, Aborted)
//   anything else                                1, "iteration N failed in WHERE: ..."
WorkerExit FailedIteration(const absl::Status& st, const absl::Status& control_failure, int64_t iteration,
                           absl::string_view where);

}  // namespace psync::runtime
