// How a node's launcher reads its job's coordinator (psyncctl --json status)
// and what it does about it: restart when the coordinator opened a new
// generation, not when the job is over or no generation ended; and the
// background probe (StatusPoller) with stand-ins for psyncctl.
#include "client/launch/coordinator_view.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/launch/status_poller.h"

namespace psync::launch {
namespace {

// What psyncctl --json status prints (proto field names, 64-bit integers as
// strings, workers after the top-level fields).
const char kRestarting[] =
    R"({"job_id":"psync","world_size":4,"joined":1,"generation":"2","state":"JOB_WAITING",)"
    R"("reason":"waiting for 4 ranks to Join generation 2","iteration":"-1","stop_after_iteration":"-1",)"
    R"("backend":"auto","workers":[{"rank":2,"state":"WORKER_JOINED","host_id":"vm/node1"}],"slowest_rank":-1,)"
    R"("restarts":1,"max_restarts":1,"start_iteration":"0",)"
    R"("last_restart_reason":"generation 1: rank 3 (vm:42) lost: stream closed"})";

CoordinatorView View(const char* state, int restarts) {
  CoordinatorView v;
  v.state = state;
  v.generation = restarts + 1;
  v.restarts = restarts;
  v.max_restarts = 2;
  return v;
}

TEST(CoordinatorView, ParsesPsyncctlStatusJson) {
  absl::StatusOr<CoordinatorView> v = ParseStatusJson(kRestarting);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->job_id, "psync");
  EXPECT_EQ(v->state, "JOB_WAITING") << "the job's state, not a worker's";
  EXPECT_EQ(v->generation, 2);
  EXPECT_EQ(v->restarts, 1);
  EXPECT_EQ(v->max_restarts, 1);
  EXPECT_EQ(v->world_size, 4);
  EXPECT_EQ(v->last_restart_reason, "generation 1: rank 3 (vm:42) lost: stream closed");
  EXPECT_FALSE(v->Over());
  EXPECT_FALSE(ParseStatusJson("psyncctl: cannot reach coordinator").ok());
  EXPECT_FALSE(ParseStatusJson(R"({"job_id":"x"})").ok()) << "no state";
  EXPECT_FALSE(ParseStatusJson(R"({"state":"JOB_RUNNING","generation":"two"})").ok());
}

TEST(CoordinatorView, ANewGenerationRestartsEveryNodeWhoeverFailed) {
  Judgement j = Judge(*ParseStatusJson(kRestarting), 1, /*local_failure=*/false);
  EXPECT_EQ(j.verdict, Verdict::kRestart) << "a node whose own ranks are fine restarts too";
  EXPECT_EQ(j.why, "the coordinator opened generation 2 (restart 1 of 1; generation 1: rank 3 (vm:42) lost: "
                   "stream closed)");
  EXPECT_EQ(Judge(*ParseStatusJson(kRestarting), 1, true).verdict, Verdict::kRestart);
  EXPECT_EQ(Judge(*ParseStatusJson(kRestarting), 2, true).verdict, Verdict::kNoRestart)
      << "already restarted for it: this node's new rank failed before the world was complete";
}

// A coordinator replaced at the same address (another instance_id) counts
// generations from 1 again: its WAITING generation 1 is not the one this
// node's workers ran, and the launcher says so instead of "still waits".
TEST(CoordinatorView, AReplacedCoordinatorIsNamedAsANewOne) {
  absl::StatusOr<CoordinatorView> v = ParseStatusJson(
      R"({"job_id":"psync","world_size":2,"generation":"2","state":"JOB_RUNNING","instance_id":"00000000000000b2"})");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->instance_id, "00000000000000b2");
  Judgement j = Judge(*v, 1, /*local_failure=*/true, "00000000000000a1");
  EXPECT_EQ(j.verdict, Verdict::kNoRestart);
  EXPECT_EQ(j.why, "a new coordinator answers (instance 00000000000000b2, not 00000000000000a1, which this node's "
                   "workers joined): the job they ran ended with the old one; its generation 2 is RUNNING (start "
                   "the nodes again to join it)");
  // Coordinator failover: one that met no job yet may still rebuild it from
  // the workers that ride through (the launcher's grace bounds the wait).
  absl::StatusOr<CoordinatorView> fresh = ParseStatusJson(
      R"({"job_id":"psync","world_size":2,"generation":"1","state":"JOB_WAITING","instance_id":"00000000000000b2"})");
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(Judge(*fresh, 1, /*local_failure=*/true, "00000000000000a1").verdict, Verdict::kGoOn);
  EXPECT_EQ(Judge(*fresh, 1, /*local_failure=*/false, "00000000000000a1").verdict, Verdict::kGoOn)
      << "the workers' streams ended with the old one: wait for them to fail or re-register";
  // The workers re-registered with the new one, which ran their job to its end.
  absl::StatusOr<CoordinatorView> took_over = ParseStatusJson(
      R"({"job_id":"psync","world_size":2,"generation":"1","state":"JOB_FINISHED","instance_id":"00000000000000b2"})");
  ASSERT_TRUE(took_over.ok());
  Judgement finished = Judge(*took_over, 1, /*local_failure=*/false, "00000000000000a1");
  EXPECT_EQ(finished.verdict, Verdict::kNoRestart) << "the job is over: the node ends";
  EXPECT_NE(finished.why.find("FINISHED"), std::string::npos) << finished.why;
  j = Judge(*fresh, 1, true, "00000000000000b2");
  EXPECT_EQ(j.verdict, Verdict::kNoRestart) << "the same instance: the old rule";
  EXPECT_NE(j.why.find("still waits for the world of generation 1"), std::string::npos) << j.why;
  EXPECT_NE(Judge(*fresh, 1, true, "").why.find("still waits"), std::string::npos) << "instance unknown: the old rule";
}

TEST(CoordinatorView, TheCoordinatorCountsRestartsNotTheNode) {
  EXPECT_EQ(Judge(View("JOB_RUNNING", 0), 1, true).verdict, Verdict::kGoOn)
      << "the loss is not noticed yet: wait for the coordinator";
  EXPECT_EQ(Judge(View("JOB_STOPPING", 1), 2, true).verdict, Verdict::kGoOn);
  EXPECT_EQ(Judge(View("JOB_RUNNING", 1), 2, false).verdict, Verdict::kGoOn);
  EXPECT_EQ(Judge(View("JOB_WAITING", 0), 1, false).verdict, Verdict::kGoOn) << "the world is forming";
  CoordinatorView aborted = View("JOB_ABORTED", 2);
  aborted.reason = "rank 1 (h:1) lost: stream closed (generation 3; all 2 restarts used)";
  Judgement j = Judge(aborted, 3, true);
  EXPECT_EQ(j.verdict, Verdict::kNoRestart) << "all restarts used: the coordinator aborted the job";
  EXPECT_EQ(j.why, "the job is ABORTED: rank 1 (h:1) lost: stream closed (generation 3; all 2 restarts used)");
  EXPECT_EQ(Judge(View("JOB_FINISHED", 0), 1, false).verdict, Verdict::kNoRestart);
  EXPECT_EQ(Judge(View("JOB_WAITING", 0), 1, true).why,
            "the coordinator still waits for the world of generation 1, so no generation ended and none follows");
}

TEST(CoordinatorView, AnElasticRegroupRestartsEveryNodeWithoutARestart) {
  // Generation 2 ran with node 0 alone (2 of 4 ranks); node 1 came back and
  // the regroup opened generation 3, which counts no restart.
  absl::StatusOr<CoordinatorView> shrunk = ParseStatusJson(
      R"({"job_id":"psync","world_size":2,"max_world_size":4,"min_world_size":2,"generation":"2",)"
      R"("state":"JOB_RUNNING","restarts":1,"max_restarts":1,)"
      R"x("world_change_reason":"2 of 4 ranks: ranks 2,3 did not join within --rejoin-timeout (3s)"})x");
  ASSERT_TRUE(shrunk.ok()) << shrunk.status();
  EXPECT_EQ(shrunk->MaxWorld(), 4);
  EXPECT_EQ(shrunk->min_world_size, 2);
  EXPECT_TRUE(shrunk->RunsShrunk()) << "a node that comes now asks for a regroup";
  EXPECT_EQ(shrunk->world_change_reason, "2 of 4 ranks: ranks 2,3 did not join within --rejoin-timeout (3s)");
  EXPECT_EQ(Judge(*shrunk, 2, false).verdict, Verdict::kGoOn);
  CoordinatorView regrouped = *shrunk;
  regrouped.generation = 3;
  regrouped.state = "JOB_WAITING";
  regrouped.last_restart_reason = "generation 2 of 2 ranks stopped after iteration 99 to regroup";
  EXPECT_FALSE(regrouped.RunsShrunk());
  Judgement j = Judge(regrouped, 2, false);
  EXPECT_EQ(j.verdict, Verdict::kRestart) << "node 0's ranks join generation 3 too";
  EXPECT_NE(j.why.find("opened generation 3"), std::string::npos) << j.why;
  CoordinatorView old = *ParseStatusJson(R"({"state":"JOB_RUNNING","world_size":4,"generation":"1"})");
  EXPECT_EQ(old.MaxWorld(), 4) << "a coordinator without max_world_size: its world size";
  EXPECT_FALSE(old.RunsShrunk());
}

// Ticks until the probe answers (bounded: 10 s).
absl::StatusOr<CoordinatorView> Answer(StatusPoller& p) {
  for (int i = 0; i < 1000; ++i) {
    if (std::optional<absl::StatusOr<CoordinatorView>> a = p.Tick(std::chrono::milliseconds(0))) return *a;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError("no answer within 10 s");
}

class StatusPollerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/psync-poller-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (int i = 0; i < pollers_; ++i) {
      unlink(absl::StrCat(dir_, "/out", i).c_str());
      unlink(absl::StrCat(dir_, "/err", i).c_str());
    }
    rmdir(dir_.c_str());
  }
  // A stand-in for psyncctl: a shell command (each poller its own files: a
  // poller's next probe may still run when the test moves on).
  StatusPoller Poller(const std::string& script) {
    const int i = pollers_++;
    return StatusPoller(Command{{"/bin/sh", "-c", script}, {}}, absl::StrCat(dir_, "/out", i),
                        absl::StrCat(dir_, "/err", i));
  }
  std::string dir_;
  int pollers_ = 0;
};

TEST_F(StatusPollerTest, AnAnswerIsCollectedInALaterRound) {
  StatusPoller p = Poller(std::string("printf '%s' '") + kRestarting + "'");
  absl::StatusOr<CoordinatorView> v = Answer(p);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->restarts, 1);
}

TEST_F(StatusPollerTest, UnreachableAndRefusedAreTold) {
  StatusPoller down = Poller("echo 'psyncctl: cannot reach coordinator at h:1: no connection within 5s' >&2; exit 1");
  absl::StatusOr<CoordinatorView> v = Answer(down);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
  EXPECT_EQ(std::string(v.status().message()), "cannot reach coordinator at h:1: no connection within 5s");
  StatusPoller refused = Poller("echo 'psyncctl: status failed at coordinator h:1: bad token' >&2; exit 1");
  v = Answer(refused);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition) << v.status();
  EXPECT_EQ(std::string(v.status().message()), "status failed at coordinator h:1: bad token");
  StatusPoller killed = Poller("kill -9 $$");
  EXPECT_EQ(std::string(Answer(killed).status().message()), "psyncctl status: killed by signal 9 (Killed)");
}

TEST_F(StatusPollerTest, ProbesNeverOverlap) {
  const std::string log = dir_ + "/log";
  StatusPoller p = Poller("echo start >> " + log + "; sleep 0.1; echo end >> " + log +
                          "; echo '{\"state\":\"JOB_RUNNING\"}'");
  int answers = 0;
  for (int i = 0; i < 1000 && answers < 3; ++i) {
    if (p.Tick(std::chrono::milliseconds(0))) ++answers;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(answers, 3);
  // One probe at a time, even asked for one every 0 ms: start, end, start, ...
  std::ifstream f(log);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) EXPECT_EQ(line, n++ % 2 == 0 ? "start" : "end") << "line " << n;
  EXPECT_GE(n, 6);
  unlink(log.c_str());
}

}  // namespace
}  // namespace psync::launch
