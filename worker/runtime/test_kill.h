// Phase-targeted kills for the live-recovery tests (worker_it.sh
// launch_live_phases; nothing else should set it):
//
//   PSYNC_TEST_KILL=PHASE@ITERATION@MARKER[,PHASE@ITERATION@MARKER...]
//
// The first psync-worker process of the job to reach PHASE of ITERATION
// while the file MARKER does not exist creates it (O_EXCL: one process
// wins), writes its pid into it and SIGKILLs itself, as `kill -9` would but
// at a chosen moment. PHASE:
//   forward    inside the model's forward
//   allreduce  backward's first bucket reduction, once it is in flight
//   step       after the optimizer step, before the iteration's end
//   heal       a live recovery's heal source, before it sends its state
//              (ITERATION: the step the new generation starts at)
//
// Threads: the training thread (At, SetIteration); Wrap's hook runs where
// the reducer issues bucket reductions (the backward thread).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "psync/ddp/comm_hook.h"

namespace psync::runtime::test_kill {

// The iteration the training thread is in (the trainer, each step).
void SetIteration(int64_t iteration);
// Dies here when PSYNC_TEST_KILL names `phase` at the current iteration.
void At(absl::string_view phase);
// `hook` itself unless PSYNC_TEST_KILL names the allreduce phase; then a
// hook that issues each reduction through `hook` (null: the default
// allreduce) and calls At("allreduce") after bucket 0's. Not under ZeRO,
// whose reducer takes no hook.
std::shared_ptr<ddp::CommHook> Wrap(std::shared_ptr<ddp::CommHook> hook);

}  // namespace psync::runtime::test_kill
