// Coordinator generations over real sockets (server in-process on
// 127.0.0.1:0 with --max-restarts, workers as CoordinatorClient objects,
// psyncctl spawned): a rank dies -> generation 1 is aborted naming it -> the
// full world re-joins as generation 2 from start_iteration -> plans continue
// from there; a worker of generation 1 is refused; with the restarts used up
// the next death aborts the job. No fixed sleeps: every wait is for an event
// with a bound.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <future>
#include <thread>

#include "psync/v1/control.pb.h"
#include "psync/v1/coordinator.grpc.pb.h"
#include "server/coordinator_server.h"
#include "server/kv_store.h"
#include "tests/common/subprocess.h"
#include "tests/integration/coordinator/coordinator_test_util.h"
#include "worker/control/coordinator_client.h"

namespace psync {
namespace {

using namespace std::chrono_literals;
using control::CoordinatorClient;
using control::PlanAction;
using test_support::AllUsed;
using test_support::WaitPlan;

struct Worker {
  std::unique_ptr<CoordinatorClient> client;
  control::JoinResult joined;
  std::shared_ptr<control::PlanMailbox> plans = std::make_shared<control::PlanMailbox>();  // the client delivers here
};

class RestartTest : public ::testing::Test {
 protected:
  void StartServer(int world, int max_restarts) {
    server::ServerOptions o = test_support::TestServerOptions(world, 10000ms);
    o.job.max_restarts = max_restarts;
    o.job.recovery = server::JobConfig::Recovery::kRestart;  // the path these tests check
    o.liveness_period = 100ms;
    auto s = server::CoordinatorServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    srv_ = std::move(*s);
    target_ = "127.0.0.1:" + std::to_string(srv_->port());
  }

  // `n` workers join concurrently (rank r asks for rank r) starting at
  // `start`, then open their Train streams; indexed by rank.
  std::vector<Worker> StartWorld(int n, int64_t start) {
    std::vector<std::future<Worker>> fs;
    for (int r = 0; r < n; ++r) {
      fs.push_back(std::async(std::launch::async, [this, r, start] {
        Worker w;
        auto c = CoordinatorClient::Connect(target_, "", 5000ms);
        EXPECT_TRUE(c.ok()) << c.status();
        if (!c.ok()) return w;
        w.client = std::move(*c);
        control::JoinRequest req = test_support::TestJoinRequest(r);
        req.start_iteration = start;
        auto j = w.client->Join(req, 10000ms);
        EXPECT_TRUE(j.ok()) << j.status();
        if (j.ok()) w.joined = *j;
        return w;
      }));
    }
    std::vector<Worker> out;
    for (auto& f : fs) out.push_back(f.get());
    for (Worker& w : out) {
      if (w.client && w.joined.rank >= 0) {
        EXPECT_TRUE(w.client->OpenTrainStream(w.joined.rank, w.joined.generation, w.plans).ok());
      }
    }
    return out;
  }

  // Every worker reports `it` and gets Plan{it} (CONTINUE).
  void Iteration(std::vector<Worker>& ws, int64_t it) {
    for (Worker& w : ws) ASSERT_TRUE(w.client->SendReport({it, AllUsed(), 0.5, 1.0, {}}).ok());
    for (Worker& w : ws) {
      auto p = WaitPlan(*w.plans, it, 10000ms);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(p->iteration, it);
      EXPECT_EQ(p->action, PlanAction::kContinue);
    }
  }

  // Polls the job (every 5 ms, up to 10 s) until `pred` holds.
  bool WaitFor(const std::function<bool(const v1::StatusResponse&)>& pred) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (true) {
      v1::StatusResponse st;
      srv_->job().FillStatus(&st);
      if (pred(st)) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
  }

  std::string Psyncctl(const std::vector<std::string>& args, int* code) {
    std::vector<std::string> argv = {PSYNCCTL_PATH, "--coordinator=" + target_};
    argv.insert(argv.end(), args.begin(), args.end());
    test_support::SpawnResult r = test_support::SpawnAndCapture(argv, 30000ms);
    *code = r.code;
    return r.output;
  }

  std::unique_ptr<server::CoordinatorServer> srv_;
  std::string target_;
};

TEST_F(RestartTest, DeadRankAbortsGenerationAndTheWorldRejoinsFromStartIteration) {
  StartServer(/*world=*/2, /*max_restarts=*/1);
  std::vector<Worker> g1 = StartWorld(2, 0);
  ASSERT_EQ(g1[0].joined.generation, 1);
  ASSERT_TRUE(srv_->kv().Set(g1[0].joined.store_prefix + "gloo/0", "addr").ok());
  Iteration(g1, 0);
  Iteration(g1, 1);

  // Rank 1 dies (its connection goes away without Done).
  g1[1].client.reset();
  auto abort = WaitPlan(*g1[0].plans, 2, 10000ms);
  ASSERT_TRUE(abort.ok()) << abort.status();
  EXPECT_EQ(abort->action, PlanAction::kAbort);
  EXPECT_NE(abort->reason.find("generation 1 aborted: rank 1 ("), std::string::npos) << abort->reason;
  EXPECT_NE(abort->reason.find("restart 1 of 1: every rank must Join generation 2"), std::string::npos)
      << abort->reason;
  ASSERT_TRUE(WaitFor([](const v1::StatusResponse& s) { return s.generation() == 2; }));
  // Generation 1's bootstrap keys are dropped (right after the generation changed).
  EXPECT_TRUE(WaitFor([this](const v1::StatusResponse&) { return srv_->kv().size() == 0; }));

  // psyncctl shows the generation and the restart count, text and JSON.
  int code = 0;
  std::string text = Psyncctl({"status"}, &code);
  EXPECT_EQ(code, 0) << text;
  EXPECT_NE(text.find("state WAITING  world 0/2  generation 2  restarts 1/1"), std::string::npos) << text;
  EXPECT_NE(text.find("last restart: generation 1: rank 1 ("), std::string::npos) << text;
  std::string json = Psyncctl({"--json", "status"}, &code);
  EXPECT_EQ(code, 0) << json;
  EXPECT_NE(json.find("\"generation\":\"2\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"restarts\":1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"max_restarts\":1"), std::string::npos) << json;

  // The event log names the rank that died and the generation.
  bool lost = false, restarting = false;
  for (const v1::Event& e : srv_->job().events().After(0)) {
    if (e.type() == v1::EVENT_LOST) {
      lost = e.rank() == 1 && e.generation() == 1 && e.message().find("(generation 1)") != std::string::npos;
    }
    if (e.type() == v1::EVENT_RESTARTING) restarting = e.rank() == 1 && e.generation() == 1;
  }
  EXPECT_TRUE(lost && restarting);

  // The world re-joins as generation 2, resuming at iteration 2.
  g1[0].client.reset();
  std::vector<Worker> g2 = StartWorld(2, 2);
  for (const Worker& w : g2) {
    EXPECT_EQ(w.joined.generation, 2);
    EXPECT_EQ(w.joined.start_iteration, 2);
    EXPECT_NE(w.joined.store_prefix, g1[0].joined.store_prefix);
  }
  Iteration(g2, 2);
  Iteration(g2, 3);
  ASSERT_TRUE(WaitFor([](const v1::StatusResponse& s) { return s.iteration() == 3; }));

  // Restarts used up: the next death aborts the job.
  g2[0].client.reset();
  auto final_abort = WaitPlan(*g2[1].plans, 4, 10000ms);
  ASSERT_TRUE(final_abort.ok()) << final_abort.status();
  EXPECT_EQ(final_abort->action, PlanAction::kAbort);
  EXPECT_NE(final_abort->reason.find("(generation 2; all 1 restarts used)"), std::string::npos)
      << final_abort->reason;
  ASSERT_TRUE(WaitFor([](const v1::StatusResponse& s) { return s.state() == v1::JOB_ABORTED; }));
  text = Psyncctl({"status"}, &code);
  EXPECT_NE(text.find("state ABORTED  world 2/2  generation 2  restarts 1/1"), std::string::npos) << text;
  // Now the job has ended, a Watch replays the history (through the restart) and ends.
  std::string watch = Psyncctl({"watch"}, &code);
  EXPECT_EQ(code, 0) << watch;
  EXPECT_NE(watch.find("RESTARTING"), std::string::npos) << watch;
  EXPECT_NE(watch.find("generation 1 aborted"), std::string::npos) << watch;
  auto late = CoordinatorClient::Connect(target_, "", 5000ms);
  ASSERT_TRUE(late.ok());
  auto refused = (*late)->Join(test_support::TestJoinRequest(0), 5000ms);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RestartTest, WorkerOfAnEndedGenerationIsRejected) {
  StartServer(/*world=*/2, /*max_restarts=*/2);
  std::vector<Worker> g1 = StartWorld(2, 0);
  Iteration(g1, 0);
  g1[1].client.reset();  // rank 1 dies
  ASSERT_TRUE(WaitFor([](const v1::StatusResponse& s) { return s.generation() == 2; }));

  // A Join that names generation 1 is refused, naming both generations.
  auto c = CoordinatorClient::Connect(target_, "", 5000ms);
  ASSERT_TRUE(c.ok());
  control::JoinRequest old = test_support::TestJoinRequest(0);
  old.generation = 1;
  auto j = (*c)->Join(old, 5000ms);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(j.status().message().find("asks to join generation 1 of job 'psync', which has ended"),
            std::string::npos)
      << j.status();
  EXPECT_NE(j.status().message().find("the job is at generation 2"), std::string::npos) << j.status();

  // Rank 0 of generation 1 goes on with its old stream: the stream is ended
  // with the reason (the client sees the coordinator's status).
  ASSERT_TRUE(g1[0].client->SendReport({1, AllUsed(), 0.5, 1.0, {}}).ok());
  auto p = WaitPlan(*g1[0].plans, 1, 10000ms);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->action, PlanAction::kAbort) << "the ABORT of generation 1 is what it gets";

  // A hello for generation 1 on a new stream is refused.
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  auto stream = stub->Train(&ctx);
  v1::TrainUp up;
  up.mutable_hello()->set_job_id("psync");
  up.mutable_hello()->set_rank(0);
  up.mutable_hello()->set_generation(1);
  stream->Write(up);
  stream->WritesDone();
  v1::Plan plan;
  EXPECT_FALSE(stream->Read(&plan));
  grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("rank 0 belongs to generation 1 of job 'psync', which has ended"),
            std::string::npos)
      << st.error_message();

  // Generation 2 still forms normally afterwards.
  g1[0].client.reset();
  std::vector<Worker> g2 = StartWorld(2, 1);
  Iteration(g2, 1);
  for (Worker& w : g2) ASSERT_TRUE(w.client->SendDone("completed", 0).ok());
  ASSERT_TRUE(WaitFor([](const v1::StatusResponse& s) { return s.state() == v1::JOB_FINISHED; }));
}

TEST_F(RestartTest, StartIterationsThatDisagreeFailTheJoinNamingTheRank) {
  StartServer(/*world=*/2, /*max_restarts=*/1);
  auto c0 = CoordinatorClient::Connect(target_, "", 5000ms);
  auto c1 = CoordinatorClient::Connect(target_, "", 5000ms);
  ASSERT_TRUE(c0.ok() && c1.ok());
  control::JoinRequest r0 = test_support::TestJoinRequest(0), r1 = test_support::TestJoinRequest(1);
  r0.start_iteration = 300;
  r1.start_iteration = 200;
  auto waiting = std::async(std::launch::async, [&] { return (*c0)->Join(r0, 3000ms); });
  ASSERT_TRUE(WaitFor([](const v1::StatusResponse& s) { return s.joined() == 1; }));
  auto j1 = (*c1)->Join(r1, 3000ms);
  EXPECT_EQ(j1.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(j1.status().message().find("rank 1 ("), std::string::npos) << j1.status();
  EXPECT_NE(j1.status().message().find("starts at iteration 200 but the first worker's (rank 0) starts at iteration 300"),
            std::string::npos)
      << j1.status();
  EXPECT_FALSE(waiting.get().ok()) << "rank 0 times out waiting (client deadline)";
}

}  // namespace
}  // namespace psync
