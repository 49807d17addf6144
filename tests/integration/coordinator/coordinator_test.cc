// Coordinator over real sockets: server in-process on 127.0.0.1:0, workers
// as CoordinatorClient objects on threads, psyncctl spawned (posix_spawn,
// never fork: this process runs gRPC).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <dirent.h>

#include <atomic>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "psync/v1/control.grpc.pb.h"
#include "psync/v1/coordinator.grpc.pb.h"
#include "server/coordinator_server.h"
#include "server/kv_store.h"
#include "tests/common/subprocess.h"
#include "tests/integration/coordinator/coordinator_test_util.h"
#include "worker/control/coordinator_client.h"

extern char** environ;

namespace psync {
namespace {

using namespace std::chrono_literals;
using control::CoordinatorClient;
using control::PlanAction;
using test_support::AllUsed;
using test_support::kParams;
using test_support::WaitFor;
using test_support::WaitPlan;

server::ServerOptions Options(int world, const std::string& token, std::chrono::milliseconds report) {
  server::ServerOptions o = test_support::TestServerOptions(world, report);
  o.token = token;
  o.liveness_period = 100ms;
  return o;
}

struct Server : test_support::TestServer {
  explicit Server(int world, const std::string& token = "", std::chrono::milliseconds report = 10000ms)
      : TestServer(Options(world, token, report)) {}
  int Joined() {
    v1::StatusResponse st;
    srv->job().FillStatus(&st);
    return st.joined();
  }

  v1::StatusResponse Status(const std::string& token = "") {
    auto ch = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    auto stub = v1::Control::NewStub(ch);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::StatusResponse r;
    last = stub->Status(&ctx, v1::StatusRequest(), &r);
    return r;
  }
  grpc::Status last;
};

control::JoinRequest Req(int rank, int params = kParams) { return test_support::TestJoinRequest(rank, params); }

std::unique_ptr<CoordinatorClient> Connect(const Server& s, const std::string& token = "") {
  auto c = CoordinatorClient::Connect(s.target, token, 5000ms);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

struct Worker {
  std::unique_ptr<CoordinatorClient> client;
  control::JoinResult joined;
  std::shared_ptr<control::PlanMailbox> plans = std::make_shared<control::PlanMailbox>();  // the client delivers here
};

// Joins `n` workers concurrently (any rank) and opens their streams; indexed by rank.
std::vector<Worker> StartWorld(const Server& s, int n) {
  std::vector<std::future<Worker>> fs;
  for (int i = 0; i < n; ++i) {
    fs.push_back(std::async(std::launch::async, [&s] {
      Worker w;
      w.client = Connect(s);
      auto j = w.client->Join(Req(-1), 10000ms);
      EXPECT_TRUE(j.ok()) << j.status();
      if (j.ok()) w.joined = *j;
      return w;
    }));
  }
  std::vector<Worker> out(static_cast<size_t>(n));
  int opened = 0;
  for (auto& f : fs) {
    Worker w = f.get();
    if (w.joined.rank < 0) continue;
    EXPECT_TRUE(w.client->OpenTrainStream(w.joined.rank, w.joined.generation, w.plans).ok());
    out[static_cast<size_t>(w.joined.rank)] = std::move(w);
    ++opened;
  }
  // Why wait: OpenTrainStream returns once the hello is written, and the
  // coordinator attaches the rank only when it reads it (a test that then
  // opens a rival stream for the rank must find it attached).
  EXPECT_TRUE(WaitFor([&] {
    v1::StatusResponse st;
    s.srv->job().FillStatus(&st);
    int training = 0;
    for (const auto& w : st.workers()) training += w.state() == v1::WORKER_TRAINING ? 1 : 0;
    return training == opened;
  })) << "the workers' Train streams never attached";
  return out;
}

TEST(Coordinator, RendezvousOfFourAndOneIteration) {
  Server s(4);
  auto ws = StartWorld(s, 4);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(ws[r].client) << r;
    EXPECT_EQ(ws[r].joined.rank, r);
    EXPECT_EQ(ws[r].joined.world_size, 4);
    EXPECT_EQ(ws[r].joined.store_prefix, ws[0].joined.store_prefix);
  }
  for (int r = 0; r < 4; ++r) {
    std::vector<uint8_t> used(kParams, 1);
    used[9] = false;
    used[r] = r != 3;  // p3 unused on rank 3 only -> still used globally
    ASSERT_TRUE(ws[r].client->SendReport({0, bitmap::Pack(used), 1.0, 5.0 + r, {}}).ok());
  }
  for (int r = 0; r < 4; ++r) {
    auto p = WaitPlan(*ws[r].plans, 0, 5000ms);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->action, PlanAction::kContinue);
    const std::vector<uint8_t>& unused = p->globally_unused;  // decoded for the manifest Join sent
    ASSERT_EQ(unused.size(), static_cast<size_t>(kParams));
    for (int i = 0; i < kParams; ++i) EXPECT_EQ(unused[i], i == 9) << i;
  }
  auto st = s.Status();
  ASSERT_TRUE(s.last.ok());
  EXPECT_EQ(st.state(), v1::JOB_RUNNING);
  EXPECT_EQ(st.iteration(), 0);
  EXPECT_EQ(st.slowest_rank(), 3);
}

TEST(Coordinator, WrongTokenIsUnauthenticated) {
  Server s(1, "s3cret");
  auto bad = Connect(s, "wrong");
  auto j = bad->Join(Req(-1), 5000ms);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(std::string(j.status().message()).find("invalid token"), std::string::npos) << j.status();
  s.Status();
  EXPECT_EQ(s.last.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.last.error_message().find("requires a token"), std::string::npos);
  s.Status("s3cret");
  EXPECT_TRUE(s.last.ok());
  auto good = Connect(s, "s3cret");
  EXPECT_TRUE(good->Join(Req(-1), 5000ms).ok());
}

TEST(Coordinator, MalformedBitmapLengthGetsInvalidArgument) {
  Server s(1);
  auto ws = StartWorld(s, 1);
  ASSERT_TRUE(ws[0].client->SendReport({0, std::string(5, '\xff'), 0, 0, {}}).ok());
  auto p = WaitPlan(*ws[0].plans, 0, 5000ms);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
  const std::string msg(p.status().message());
  EXPECT_NE(msg.find("INVALID_ARGUMENT"), std::string::npos) << msg;
  EXPECT_NE(msg.find("used_bitmap is 5 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must be 2 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("coordinator at " + s.target + " lost"), std::string::npos) << msg;
  s.Status();
  EXPECT_TRUE(s.last.ok());  // server still serves
}

TEST(Coordinator, GarbageStreamsDoNotDisturbTheJob) {
  Server s(1);
  auto ws = StartWorld(s, 1);
  auto ch = grpc::CreateChannel(s.target, grpc::InsecureChannelCredentials());
  auto stub = v1::Coordinator::NewStub(ch);
  {  // report before hello
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    auto st = stub->Train(&ctx);
    v1::TrainUp up;
    up.mutable_report()->set_iteration(0);
    st->Write(up);
    st->WritesDone();
    v1::Plan p;
    EXPECT_FALSE(st->Read(&p));
    EXPECT_EQ(st->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {  // hijack an attached rank
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    auto st = stub->Train(&ctx);
    v1::TrainUp up;
    up.mutable_hello()->set_job_id("psync");
    up.mutable_hello()->set_rank(0);
    up.mutable_hello()->set_generation(ws[0].joined.generation);
    st->Write(up);
    st->WritesDone();
    v1::Plan p;
    EXPECT_FALSE(st->Read(&p));
    EXPECT_EQ(st->Finish().error_code(), grpc::StatusCode::ALREADY_EXISTS);
  }
  {  // unknown rank
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    auto st = stub->Train(&ctx);
    v1::TrainUp up;
    up.mutable_hello()->set_job_id("psync");
    up.mutable_hello()->set_rank(99);
    st->Write(up);
    st->WritesDone();
    v1::Plan p;
    EXPECT_FALSE(st->Read(&p));
    EXPECT_EQ(st->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  ASSERT_TRUE(ws[0].client->SendReport({0, AllUsed(), 0, 0, {}}).ok());
  auto p = WaitPlan(*ws[0].plans, 0, 5000ms);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->action, PlanAction::kContinue);
}

TEST(Coordinator, DuplicateRankAndMismatchedModelRefused) {
  Server s(2);
  auto a = Connect(s);
  auto fa = std::async(std::launch::async, [&] { return a->Join(Req(1), 10000ms); });
  ASSERT_TRUE(WaitFor([&] { return s.Joined() == 1; })) << "rank 1 never joined";
  auto b = Connect(s);
  auto dup = b->Join(Req(1), 5000ms);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(std::string(dup.status().message()).find("rank 1 is already taken"), std::string::npos);
  auto req = Req(0);
  req.manifest[4].shape = {3, 3};
  auto mm = b->Join(req, 5000ms);
  EXPECT_EQ(mm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(mm.status().message()).find("parameter 4 is 'p4' [3, 3] here but 'p4' [1] there"),
            std::string::npos)
      << mm.status();
  // The waiting rank 1 is told at once that the world cannot form (not
  // after its Join's deadline); then both join again.
  absl::StatusOr<control::JoinResult> first = fa.get();
  EXPECT_EQ(first.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(first.status().message()).find("was refused, so the world cannot form"), std::string::npos)
      << first.status();
  auto again = std::async(std::launch::async, [&] { return a->Join(Req(1), 10000ms); });
  ASSERT_TRUE(WaitFor([&] { return s.Joined() == 1; })) << "rank 1 never joined again";
  EXPECT_TRUE(b->Join(Req(0), 5000ms).ok());
  EXPECT_TRUE(again.get().ok());
}

TEST(Coordinator, StoreGetWaitsForSetAndTimesOut) {
  Server s(1);
  auto a = Connect(s);
  auto b = Connect(s);
  auto f = std::async(std::launch::async, [&] { return a->StoreGet("psync/k", 10000ms); });
  // The Get is parked in the store (no answer yet) before the Set happens.
  ASSERT_TRUE(WaitFor([&] { return s.srv->kv().waiting() == 1; })) << "StoreGet never reached the store";
  ASSERT_EQ(f.wait_for(0ms), std::future_status::timeout) << "StoreGet returned before the key was set";
  ASSERT_TRUE(b->StoreSet("psync/k", std::string("v\0x", 3)).ok());
  auto v = f.get();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("v\0x", 3));
  EXPECT_EQ(s.srv->kv().waiting(), 0u);
  auto miss = a->StoreGet("psync/missing", 200ms);
  EXPECT_EQ(miss.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(std::string(miss.status().message()).find("store key 'psync/missing' not set within 200 ms"),
            std::string::npos)
      << miss.status();
  EXPECT_EQ(a->StoreSet("psync/big", std::string((1 << 20) + 1, 'x')).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Coordinator, DroppedStreamAbortsOthersNamingIt) {
  Server s(3);
  auto ws = StartWorld(s, 3);
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(ws[r].client->SendReport({0, AllUsed(), 0, 0, {}}).ok());
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(WaitPlan(*ws[r].plans, 0, 5000ms).ok());
  ASSERT_TRUE(ws[0].client->SendReport({1, AllUsed(), 0, 0, {}}).ok());
  ws[1].client->Close();  // rank 1 dies without Done
  for (int r : {0, 2}) {
    auto p = WaitPlan(*ws[r].plans, 1, 5000ms);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->action, PlanAction::kAbort);
    EXPECT_NE(p->reason.find("rank 1 ("), std::string::npos) << p->reason;
    EXPECT_NE(p->reason.find("lost: stream closed"), std::string::npos) << p->reason;
  }
  auto st = s.Status();
  ASSERT_TRUE(s.last.ok());
  EXPECT_EQ(st.state(), v1::JOB_ABORTED);
  EXPECT_NE(st.reason().find("rank 1"), std::string::npos);
  auto late = Connect(s);
  auto j = late->Join(Req(-1), 5000ms);
  EXPECT_NE(std::string(j.status().message()).find("was aborted"), std::string::npos) << j.status();
}

TEST(Coordinator, ReportTimeoutAbortsNamingIteration) {
  Server s(2, "", 300ms);
  auto ws = StartWorld(s, 2);
  ASSERT_TRUE(ws[0].client->SendReport({0, AllUsed(), 0, 0, {}}).ok());
  auto p = WaitPlan(*ws[0].plans, 0, 5000ms);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->action, PlanAction::kAbort);
  EXPECT_NE(p->reason.find("no report for iteration 0 within 300ms"), std::string::npos) << p->reason;
}

TEST(Coordinator, ShutdownStopsAllAtSameIteration) {
  Server s(3);
  auto ws = StartWorld(s, 3);
  ASSERT_EQ(ws[0].joined.plan_lookahead, 2);
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(ws[r].client->SendReport({0, AllUsed(), 0, 0, {}}).ok());
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(WaitPlan(*ws[r].plans, 0, 5000ms).ok());
  ASSERT_TRUE(ws[2].client->SendReport({1, AllUsed(), 0, 0, {}}).ok());
  ASSERT_TRUE(ws[2].client->SendReport({2, AllUsed(), 0, 0, {}}).ok());  // runs ahead (lookahead 2)
  auto ch = grpc::CreateChannel(s.target, grpc::InsecureChannelCredentials());
  auto stub = v1::Control::NewStub(ch);
  grpc::ClientContext ctx;
  v1::ShutdownResponse resp;
  ASSERT_TRUE(stub->Shutdown(&ctx, v1::ShutdownRequest(), &resp).ok());
  EXPECT_EQ(resp.stop_after_iteration(), 2) << "first unsent plan 1 + lookahead 2 - 1";
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ws[r].client->SendReport({1, AllUsed(), 0, 0, {}}).ok());
    ASSERT_TRUE(ws[r].client->SendReport({2, AllUsed(), 0, 0, {}}).ok());
  }
  for (int r = 0; r < 3; ++r) {
    for (int64_t it : {1, 2}) {
      auto p = WaitPlan(*ws[r].plans, it, 5000ms);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(p->iteration, it);
      EXPECT_EQ(p->action, PlanAction::kStopAfter);
      EXPECT_EQ(p->stop_after, 2);
    }
  }
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(ws[r].client->SendDone("stopped after iteration 2").ok());
  ASSERT_TRUE(WaitFor([&] { return s.srv->job().state() == v1::JOB_FINISHED; }));
}

TEST(Coordinator, HostIdsOfEveryRankInJoinResultAndWorkers) {
  Server s(3);
  std::vector<std::future<absl::StatusOr<control::JoinResult>>> fs;
  std::vector<std::unique_ptr<CoordinatorClient>> cs;
  for (int r = 0; r < 3; ++r) cs.push_back(Connect(s));
  for (int r = 0; r < 3; ++r) {
    fs.push_back(std::async(std::launch::async, [&, r] {
      auto req = Req(r);
      req.host_id = r == 1 ? "hostB" : "hostA";
      return cs[static_cast<size_t>(r)]->Join(req, 10000ms);
    }));
  }
  for (auto& f : fs) {
    auto j = f.get();
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(j->host_ids, (std::vector<std::string>{"hostA", "hostB", "hostA"}));
  }
  std::string out;
  test_support::SpawnResult r = test_support::SpawnAndCapture({PSYNCCTL_PATH, "--coordinator=" + s.target, "workers"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("HOST_ID"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hostB"), std::string::npos) << r.output;
}

// Bad input on a live Train stream ends that stream with a status naming the
// problem; the server keeps serving.
TEST(Coordinator, BadReadyOrderOnALiveStreamNamesIt) {
  Server s(2);
  auto ws = StartWorld(s, 2);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ws[r].client->SendReport({0, AllUsed(), 0, 0, {}}).ok());
  // Plan 0 on both: both streams are attached before the job aborts (a
  // stream opened after the abort is refused instead: next test).
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(WaitPlan(*ws[r].plans, 0, 5000ms).ok());
  ASSERT_TRUE(ws[0].client->SendReport({1, AllUsed(), 0, 0, {0, 1, 1}}).ok());  // 1 twice
  auto p = WaitPlan(*ws[0].plans, 1, 5000ms);
  ASSERT_FALSE(p.ok());
  const std::string msg(p.status().message());
  EXPECT_NE(msg.find("INVALID_ARGUMENT"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ready_order"), std::string::npos) << msg;
  // Rank 1 reports after the abort (as a heartbeat may): the coordinator
  // ends its stream, and the ABORT plan queued first still arrives.
  ASSERT_TRUE(WaitFor([&] { return s.srv->job().state() == v1::JOB_ABORTED; }));
  (void)ws[1].client->SendReport({1, AllUsed(), 0, 0, {}});
  // Rank 1 hears that rank 0 was lost for it.
  auto q = WaitPlan(*ws[1].plans, 1, 5000ms);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->action, PlanAction::kAbort);
  EXPECT_NE(q->reason.find("rank 0 ("), std::string::npos) << q->reason;
  EXPECT_NE(q->reason.find("protocol error"), std::string::npos) << q->reason;
  EXPECT_NE(q->reason.find("ready_order"), std::string::npos) << q->reason;
  s.Status();
  EXPECT_TRUE(s.last.ok());
}

// A rank whose Train stream opens after the job aborted (it joined, then a
// peer died before its hello was read) hears why as Aborted: a peer's fault
// (exit 4), not a lost coordinator (exit 5).
TEST(Coordinator, StreamOpenedAfterAbortIsAbortedNamingTheCause) {
  Server s(2);
  std::vector<std::unique_ptr<CoordinatorClient>> cs;
  std::vector<std::shared_ptr<control::PlanMailbox>> plans;
  for (int r = 0; r < 2; ++r) {
    cs.push_back(Connect(s));
    plans.push_back(std::make_shared<control::PlanMailbox>());
  }
  std::vector<std::future<absl::StatusOr<control::JoinResult>>> joins;
  for (int r = 0; r < 2; ++r) {
    joins.push_back(std::async(std::launch::async, [&, r] { return cs[static_cast<size_t>(r)]->Join(Req(r), 10000ms); }));
  }
  int64_t generation = 0;
  for (auto& f : joins) {
    auto j = f.get();
    ASSERT_TRUE(j.ok()) << j.status();
    generation = j->generation;
  }
  ASSERT_TRUE(cs[1]->OpenTrainStream(1, generation, plans[1]).ok());
  ASSERT_TRUE(WaitFor([&] {
    v1::StatusResponse st;
    s.srv->job().FillStatus(&st);
    for (const auto& w : st.workers()) {
      if (w.rank() == 1 && w.state() == v1::WORKER_TRAINING) return true;
    }
    return false;
  }));
  cs[1]->Close();  // rank 1 dies without Done: the job aborts
  ASSERT_TRUE(WaitFor([&] { return s.srv->job().state() == v1::JOB_ABORTED; }));
  (void)cs[0]->OpenTrainStream(0, generation, plans[0]);  // may fail at once, or end the stream just after
  auto p = WaitPlan(*plans[0], 0, 5000ms);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kAborted) << p.status();
  EXPECT_NE(p.status().message().find("job aborted: rank 1 ("), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("stream closed"), std::string::npos) << p.status();
}

TEST(Coordinator, BadTokenOnTrainStreamAndShutdown) {
  Server s(1, "s3cret");
  auto ch = grpc::CreateChannel(s.target, grpc::InsecureChannelCredentials());
  {  // Train with a wrong token: refused before hello, nothing attached.
    auto stub = v1::Coordinator::NewStub(ch);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer nope");
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    auto st = stub->Train(&ctx);
    v1::TrainUp up;
    up.mutable_hello()->set_job_id("psync");
    up.mutable_hello()->set_rank(0);
    st->Write(up);
    st->WritesDone();
    v1::Plan p;
    EXPECT_FALSE(st->Read(&p));
    grpc::Status fin = st->Finish();
    EXPECT_EQ(fin.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_NE(fin.error_message().find("invalid token"), std::string::npos) << fin.error_message();
  }
  {  // Shutdown without / with a wrong token: refused, the job keeps waiting.
    auto stub = v1::Control::NewStub(ch);
    for (const char* token : {"", "Bearer s3cre", "Bearer s3cret2", "s3cret"}) {
      grpc::ClientContext ctx;
      if (*token) ctx.AddMetadata("authorization", token);
      v1::ShutdownResponse resp;
      grpc::Status st = stub->Shutdown(&ctx, v1::ShutdownRequest(), &resp);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
    }
    EXPECT_EQ(s.srv->job().state(), v1::JOB_WAITING);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer s3cret");
    v1::ShutdownResponse resp;
    EXPECT_TRUE(stub->Shutdown(&ctx, v1::ShutdownRequest(), &resp).ok());
    EXPECT_EQ(s.srv->job().state(), v1::JOB_FINISHED);
  }
}

// Threads in this process (/proc/self/task).
int ThreadCount() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// 200 Joins and 200 StoreGets wait at once (the world is 201 ranks): with the
// callback API none of them holds a server thread, so the thread count stays
// put (the sync server needed one thread each).
TEST(Coordinator, WaitingJoinsAndStoreGetsHoldNoThread) {
  Server s(201);
  auto ch = grpc::CreateChannel(s.target, grpc::InsecureChannelCredentials());
  auto stub = v1::Coordinator::NewStub(ch);
  // Warm up gRPC's own pools (client and server) with one round trip.
  {
    grpc::ClientContext ctx;
    v1::StoreSetRequest req;
    req.set_job_id("psync");
    req.set_key("warm");
    v1::StoreSetResponse resp;
    ASSERT_TRUE(stub->StoreSet(&ctx, req, &resp).ok());
  }
  const int before = ThreadCount();
  constexpr int kN = 200;
  struct Call {
    grpc::ClientContext ctx;
    v1::JoinRequest jreq;
    v1::JoinResponse jresp;
    v1::StoreGetRequest greq;
    v1::StoreGetResponse gresp;
    grpc::ClientContext gctx;
  };
  std::vector<std::unique_ptr<Call>> calls;
  std::atomic<int> finished{0};
  for (int i = 0; i < kN; ++i) {
    auto c = std::make_unique<Call>();
    c->jreq.set_job_id("psync");
    c->jreq.set_requested_rank(-1);
    c->jreq.set_hostname("t");
    c->jreq.set_backend("gloo");
    c->jreq.set_bucket_cap_bytes(16);
    c->jreq.set_first_bucket_cap_bytes(8);
    auto* p = c->jreq.add_manifest();
    p->set_name("p0");  // the manifest of TestJoinRequest(-1, 1)
    p->add_shape(1);
    p->set_element_size(4);
    c->ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    stub->async()->Join(&c->ctx, &c->jreq, &c->jresp, [&finished](grpc::Status) { ++finished; });
    c->greq.set_job_id("psync");
    c->greq.set_key("later");
    c->greq.set_timeout_ms(30000);
    c->gctx.set_deadline(std::chrono::system_clock::now() + 30s);
    stub->async()->StoreGet(&c->gctx, &c->greq, &c->gresp, [&finished](grpc::Status) { ++finished; });
    calls.push_back(std::move(c));
  }
  ASSERT_TRUE(WaitFor([&] { return s.Joined() == kN && s.srv->kv().waiting() == kN; }));
  const int during = ThreadCount();
  EXPECT_EQ(finished.load(), 0);
  EXPECT_LT(during - before, 16) << "threads before " << before << ", with " << kN
                                 << " waiting Joins and StoreGets " << during;
  ASSERT_TRUE(s.srv->kv().Set("later", "v").ok());
  auto last = Connect(s);
  auto j = last->Join(Req(-1, 1), 10000ms);  // the 201st rank completes the world
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(WaitFor([&] { return finished.load() == 2 * kN; }));
  for (auto& c : calls) EXPECT_EQ(c->jresp.world_size(), 201);
}

// Runs a binary (bounded); returns exit code; stdout+stderr in *out.
int Spawn(const std::vector<std::string>& argv, std::string* out) {
  test_support::SpawnResult r = test_support::SpawnAndCapture(argv);
  *out = r.output;
  return r.code;
}

TEST(Coordinator, PsyncctlAgainstLiveServerAndDeadPort) {
  Server s(2);
  std::string out;
  EXPECT_EQ(Spawn({PSYNCCTL_PATH, "--coordinator=" + s.target, "--json", "status"}, &out), 0) << out;
  EXPECT_NE(out.find("\"world_size\":2"), std::string::npos) << out;
  EXPECT_NE(out.find("\"state\":\"JOB_WAITING\""), std::string::npos) << out;
  EXPECT_EQ(Spawn({PSYNCCTL_PATH, "--coordinator=" + s.target, "status"}, &out), 0) << out;
  EXPECT_NE(out.find("state WAITING  world 0/2"), std::string::npos) << out;
  EXPECT_EQ(Spawn({PSYNCCTL_PATH, "--coordinator=127.0.0.1:1", "--timeout=2", "status"}, &out), 1) << out;
  EXPECT_NE(out.find("psyncctl: cannot reach coordinator at 127.0.0.1:1: "), std::string::npos) << out;
}

}  // namespace
}  // namespace psync
