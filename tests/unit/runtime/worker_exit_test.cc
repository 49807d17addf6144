// How psync-worker's exit is decided (worker/runtime/worker_exit.h): the code
// an error carries wins, the control plane's failure names an ABORT or a
// lost coordinator, a failed collective means a lost peer, nothing is
// classified by its text.
#include "worker/runtime/worker_exit.h"

#include <gtest/gtest.h>

namespace psync::runtime {
namespace {

TEST(WorkerExit, AnErrorsOwnCodeElseThePhases) {
  WorkerExit bad = ExitFor(absl::InvalidArgumentError("--data x: no such file"), kExitBadInput);
  EXPECT_EQ(bad.code, kExitBadInput);
  EXPECT_EQ(bad.reason, "--data x: no such file");
  WorkerExit tagged = ExitFor(WithExitCode(absl::UnavailableError("rendezvous failed: x"), kExitRendezvous),
                              kExitBadInput);
  EXPECT_EQ(tagged.code, kExitRendezvous);
}

TEST(WorkerExit, TheControlPlanesFailureDecidesFirst) {
  const absl::Status collective = absl::UnavailableError("allreduce #3 failed: connection to rank 1 lost");
  WorkerExit abort = FailedIteration(
      collective, WithExitCode(absl::AbortedError("rank 1 (h:1) lost: stream closed"), kExitPeerLost), 7,
      "forward/backward");
  EXPECT_EQ(abort.code, kExitPeerLost);
  EXPECT_EQ(abort.reason, "job aborted at iteration 7: rank 1 (h:1) lost: stream closed");
  WorkerExit lost = FailedIteration(
      collective, WithExitCode(absl::UnavailableError("coordinator at h:1 lost: UNAVAILABLE: x"), kExitCoordinatorLost),
      7, "forward/backward");
  EXPECT_EQ(lost.code, kExitCoordinatorLost);
  EXPECT_EQ(lost.reason, "coordinator lost at iteration 7: coordinator at h:1 lost: UNAVAILABLE: x");
}

TEST(WorkerExit, ACodeTheErrorCarriesIsNotGuessedAt) {
  // The step check names the rank out of step and tags its verdict: no "(a peer was lost?)".
  WorkerExit out_of_step = FailedIteration(
      WithExitCode(absl::AbortedError("DDP: rank 1 is out of step: ..."), kExitPeerLost), absl::OkStatus(), 5,
      "forward/backward");
  EXPECT_EQ(out_of_step.code, kExitPeerLost);
  EXPECT_EQ(out_of_step.reason, "iteration 5 failed in forward/backward: DDP: rank 1 is out of step: ...");
  WorkerExit data = FailedIteration(WithExitCode(absl::UnavailableError("data: x"), kExitBadInput), absl::OkStatus(),
                                    2, "reading the data");
  EXPECT_EQ(data.code, kExitBadInput);
  EXPECT_EQ(data.reason, "iteration 2 failed in reading the data: data: x");
}

TEST(WorkerExit, AnUntaggedCollectiveErrorIsALostPeerAndTheRestInternal) {
  for (const absl::Status& st : {absl::UnavailableError("x"), absl::DeadlineExceededError("x"), absl::AbortedError("x")}) {
    WorkerExit e = FailedIteration(st, absl::OkStatus(), 3, "evaluation");
    EXPECT_EQ(e.code, kExitPeerLost) << st;
    EXPECT_EQ(e.reason, "iteration 3 failed in evaluation (a peer was lost?): x");
  }
  WorkerExit internal = FailedIteration(absl::InvalidArgumentError("bad plan"), absl::OkStatus(), 3, "x");
  EXPECT_EQ(internal.code, kExitInternal);
  EXPECT_EQ(internal.reason, "iteration 3 failed in x: bad plan");
}

}  // namespace
}  // namespace psync::runtime
