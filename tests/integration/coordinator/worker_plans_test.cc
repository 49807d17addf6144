// psync-worker against psync-coordinator (real processes on 127.0.0.1):
//  - the coordinator holds every plan back (--test-only-plan-delay): without
//    find_unused_parameters the workers keep stepping ahead of the plans
//    (their traces show steps started before the previous step's plan came,
//    never more than the lookahead ahead), and a shutdown still stops every
//    rank after the same iteration, the one psyncctl announced;
//  - a worker's memory stays flat over 20,000 steps with unused parameters
//    in every step (the plan mailbox drops what it consumed).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "common/json.h"
#include "tests/common/background_process.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"

namespace psync {
namespace {

using namespace std::chrono_literals;
using test_support::BackgroundProcess;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Starts a coordinator on 127.0.0.1 with `flags`; returns "127.0.0.1:PORT" or "".
std::string StartCoordinator(std::unique_ptr<BackgroundProcess>* out, const test_support::TempDir& dir,
                             const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {PSYNC_COORDINATOR_PATH, "--host=127.0.0.1", "--port=0",
                                   "--port-file=" + dir.File("port")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  *out = std::make_unique<BackgroundProcess>(argv, dir.File("coordinator.log"));
  if (!(*out)->WaitForOutput([](const std::string& s) { return s.find("listening on") != std::string::npos; })) {
    ADD_FAILURE() << "coordinator did not start: " << (*out)->Output();
    return "";
  }
  return "127.0.0.1:" + std::to_string(std::stoi(ReadFile(dir.File("port"))));
}

std::unique_ptr<BackgroundProcess> StartWorker(const test_support::TempDir& dir, const std::string& target, int rank,
                                               int world, const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {PSYNC_WORKER_PATH, "--coordinator=" + target, "--rank=" + std::to_string(rank),
                                   "--world-size=" + std::to_string(world)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return std::make_unique<BackgroundProcess>(argv, dir.File("w" + std::to_string(rank) + ".log"),
                                             std::vector<std::string>{"OPENBLAS_NUM_THREADS=1"});
}

std::string Ctl(const std::string& target, const std::vector<std::string>& args, int* code = nullptr) {
  std::vector<std::string> argv = {PSYNCCTL_PATH, "--coordinator=" + target};
  argv.insert(argv.end(), args.begin(), args.end());
  test_support::SpawnResult r = test_support::SpawnAndCapture(argv, 30s);
  if (code) *code = r.code;
  return r.output;
}

int64_t JsonInt(const json::Json& o, const char* key) {
  if (!o.contains(key)) return -1;
  const json::Json& v = o[key];
  if (v.is_string()) return std::stoll(v.get<std::string>());  // proto3 JSON prints int64 as a string
  return v.is_number() ? v.get<int64_t>() : -1;
}

TEST(WorkerPlans, WorkersStepAheadOfHeldBackPlansAndAllStopAfterTheSameIteration) {
  test_support::TempDir dir("psync-plans");
  std::unique_ptr<BackgroundProcess> coord;
  // Each plan is held back 600 ms, far longer than a step of this tiny model.
  const std::string target = StartCoordinator(&coord, dir, {"--world-size=2", "--test-only-plan-delay=600ms"});
  ASSERT_FALSE(target.empty());
  std::vector<std::unique_ptr<BackgroundProcess>> ws;
  for (int r = 0; r < 2; ++r) {
    ws.push_back(StartWorker(dir, target, r, 2,
                             {"--steps=1000000", "--quiet", "--widths=8,8,4", "--global-batch=8",
                              "--trace=" + dir.File("trace_{rank}.json"), "--summary=" + dir.File("sum_{rank}.json")}));
  }
  // Wait until plans are flowing (the coordinator made a few), then stop the job.
  int64_t made = -1;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (made < 3 && std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<json::Json> st = json::Parse(Ctl(target, {"--json", "status"}));
    if (st.ok()) made = JsonInt(*st, "iteration");
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_GE(made, 3) << coord->Output();
  int code = 0;
  const std::string out = Ctl(target, {"--json", "shutdown"}, &code);
  ASSERT_EQ(code, 0) << out;
  absl::StatusOr<json::Json> resp = json::Parse(out);
  ASSERT_TRUE(resp.ok()) << out;
  const int64_t stop = JsonInt(*resp, "stop_after_iteration");
  ASSERT_GT(stop, made) << out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ws[static_cast<size_t>(r)]->Wait(120s), 0) << ws[static_cast<size_t>(r)]->Output();
    EXPECT_NE(ws[static_cast<size_t>(r)]->Output().find("stopped after iteration " + std::to_string(stop) + " ("),
              std::string::npos)
        << "rank " << r << ": " << ws[static_cast<size_t>(r)]->Output();
    absl::StatusOr<json::Json> sum = json::Parse(ReadFile(dir.File("sum_" + std::to_string(r) + ".json")));
    ASSERT_TRUE(sum.ok()) << sum.status();
    EXPECT_EQ((*sum)["steps_completed"].get<int64_t>(), stop + 1) << "rank " << r;
    EXPECT_EQ((*sum)["exit_code"].get<int>(), 0);

    // Behaviour, from the rank's own trace: steps started before the previous
    // step's plan had arrived, and never more than K = 2 ahead of the plans.
    absl::StatusOr<json::Json> trace = json::Parse(ReadFile(dir.File("trace_" + std::to_string(r) + ".json")));
    ASSERT_TRUE(trace.ok()) << trace.status();
    int ahead = 0;
    for (const json::Json& e : (*trace)["traceEvents"]) {
      if (!e.contains("name") || e["name"] != "ahead of plans") continue;
      const int64_t step = std::stoll(e["args"]["step"].get<std::string>());
      const int64_t latest = std::stoll(e["args"]["latest_plan"].get<std::string>());
      EXPECT_LT(latest, step - 1);
      EXPECT_GE(latest, step - 2) << "rank " << r << " started step " << step << " without Plan{" << step - 2 << "}";
      ++ahead;
    }
    EXPECT_GE(ahead, 2) << "rank " << r << " never ran ahead of the held-back plans";
  }
  EXPECT_EQ(coord->Stop(), 0);
}

// Resident set size of `pid` in kB (VmRSS), -1 if unknown.
long RssKb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

TEST(WorkerPlans, WorkerMemoryStaysFlatOver20000StepsWithUnusedParameters) {
  test_support::TempDir dir("psync-rss");
  std::unique_ptr<BackgroundProcess> coord;
  const std::string target = StartCoordinator(&coord, dir, {"--world-size=1"});
  ASSERT_FALSE(target.empty());
  // Layer 1 is skipped in every step, so its parameters are unused every step
  // and every plan carries a non-empty unused set.
  auto w = StartWorker(dir, target, 0, 1,
                       {"--steps=20000", "--widths=8,8,8,4", "--skip-layer=1", "--skip-pattern=always",
                        "--find-unused-parameters", "--global-batch=4", "--progress-every=1000"});
  auto reached = [&](int step) {
    return w->WaitForOutput(
        [step](const std::string& s) { return s.find("step " + std::to_string(step) + "/20000") != std::string::npos; },
        300s);
  };
  ASSERT_TRUE(reached(3000)) << w->Output();
  const long early = RssKb(w->pid());
  ASSERT_TRUE(reached(19000)) << w->Output();
  const long late = RssKb(w->pid());
  ASSERT_GT(early, 0);
  ASSERT_GT(late, 0);
  EXPECT_EQ(w->Wait(120s), 0) << w->Output();
  std::printf("worker RSS at step 3000: %ld kB, at step 19000: %ld kB (%+ld kB)\n", early, late, late - early);
  // Before the mailbox dropped consumed plans, 16,000 steps of this model
  // grew the worker by ~4 MB; what remains is the per-step timing history.
  EXPECT_LT(late - early, 1536) << "worker RSS grew from " << early << " kB to " << late << " kB";
  {
    absl::StatusOr<json::Json> st = json::Parse(Ctl(target, {"--json", "unused"}));
    ASSERT_TRUE(st.ok());
  }
  EXPECT_EQ(coord->Stop(), 0);
}

}  // namespace
}  // namespace psync
