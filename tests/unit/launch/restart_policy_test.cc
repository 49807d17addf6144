// psync-launch's restart rules: which failure is named, when every worker is
// restarted, and the flags of a restarted generation.
#include "client/launch/restart_policy.h"

#include <gtest/gtest.h>

namespace psync::launch {
namespace {

TEST(RestartPolicy, TheFirstFailureIsNamedNotItsConsequences) {
  // Rank 2 was killed (SIGKILL = 137); ranks 0 and 3 then lost their peer (4).
  std::vector<WorkerEnd> ends = {{0, 4, 7}, {1, 0, 3}, {2, 137, 7}, {3, 4, 9}};
  auto f = FirstFailure(ends);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->rank, 2) << "same round as rank 0's exit 4, and not a consequence";
  EXPECT_EQ(f->exit_code, 137);
  // Seen earlier wins, even if it is a 4 (the real failure was not local).
  EXPECT_EQ(FirstFailure({{0, 4, 1}, {1, 1, 2}})->rank, 0);
  // Same round, same kind: the lowest rank.
  EXPECT_EQ(FirstFailure({{3, 1, 5}, {1, 1, 5}})->rank, 1);
  EXPECT_FALSE(FirstFailure({{0, 0, 1}, {1, 0, 1}}).has_value()) << "everybody finished";
  EXPECT_FALSE(FirstFailure({}).has_value());
}

TEST(RestartPolicy, RestartsUntilTheyAreUsedUp) {
  const WorkerEnd killed{1, 137, 1};
  EXPECT_EQ(Decide(killed, 0, 0, false), RestartDecision::kNoRestartsLeft) << "--max-restarts=0: as before";
  EXPECT_EQ(Decide(killed, 0, 2, false), RestartDecision::kRestart);
  EXPECT_EQ(Decide(killed, 1, 2, false), RestartDecision::kRestart);
  EXPECT_EQ(Decide(killed, 2, 2, false), RestartDecision::kNoRestartsLeft);
  EXPECT_EQ(Decide({0, 4, 1}, 0, 2, false), RestartDecision::kRestart) << "a lost peer elsewhere is restarted too";
  EXPECT_EQ(Decide({0, 2, 1}, 0, 2, false), RestartDecision::kNotRetriable) << "bad flags fail the same way again";
  EXPECT_EQ(Decide({0, 127, 1}, 0, 2, false), RestartDecision::kNotRetriable) << "a program that cannot be run, too";
  EXPECT_EQ(Decide({0, 126, 1}, 0, 2, false), RestartDecision::kNotRetriable);
  EXPECT_EQ(Decide(killed, 0, 2, true), RestartDecision::kStopping) << "after Ctrl-C nothing is restarted";
}

TEST(RestartPolicy, ResumeIsAddedOnRestartsWhenThereIsACheckpointDir) {
  const std::vector<std::string> plain = {"--steps=100", "--save=w.st"};
  bool added = true;
  EXPECT_EQ(WorkerFlagsFor(plain, 1, &added), plain);
  EXPECT_FALSE(added) << "no --checkpoint-dir: nothing to resume from";

  const std::vector<std::string> ckpt = {"--steps=100", "--checkpoint-dir=/ck", "--checkpoint-every=10"};
  EXPECT_EQ(WorkerFlagsFor(ckpt, 0, &added), ckpt);
  EXPECT_FALSE(added) << "the first start runs the user's flags as given";
  std::vector<std::string> want = ckpt;
  want.push_back("--resume");
  EXPECT_EQ(WorkerFlagsFor(ckpt, 1, &added), want);
  EXPECT_TRUE(added);
  EXPECT_EQ(WorkerFlagsFor(ckpt, 3), want);

  EXPECT_EQ(WorkerFlagsFor({"--checkpoint_dir", "/ck"}, 1).back(), "--resume") << "underscore spelling, split value";
  const std::vector<std::string> already = {"--checkpoint-dir=/ck", "--resume"};
  EXPECT_EQ(WorkerFlagsFor(already, 1), already);
  const std::vector<std::string> declined = {"--checkpoint-dir=/ck", "--noresume"};
  EXPECT_EQ(WorkerFlagsFor(declined, 1), declined) << "the user said no";
}

}  // namespace
}  // namespace psync::launch
