// Host streams over real gRPC on 127.0.0.1 (coordinator.proto "Host
// streams"): an in-process coordinator, raw host streams, and psync-relay's
// core (PlanRelay) carrying CoordinatorClient workers' streams.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <future>
#include <thread>

#include "client/relay/plan_relay.h"
#include "psync/v1/coordinator.grpc.pb.h"
#include "server/coordinator_server.h"
#include "tests/integration/coordinator/coordinator_test_util.h"
#include "tests/integration/coordinator/raw_grpc.h"
#include "worker/runtime/coordinator/coordinator_client.h"

namespace psync {
namespace {

using namespace std::chrono_literals;
using coordinator::Action;
using coordinator::CoordinatorClient;
using test_support::AllUsed;
using test_support::WaitFor;

server::ServerOptions Options(int world, const std::string& token, int max_restarts) {
  server::ServerOptions o = test_support::TestServerOptions(world, 10000ms);
  o.token = token;
  o.liveness_period = 100ms;
  o.job.max_restarts = max_restarts;
  return o;
}

struct Server : test_support::TestServer {
  explicit Server(int world, const std::string& token = "", int max_restarts = 0)
      : TestServer(Options(world, token, max_restarts)) {}
  v1::JobState State() { return srv->job().state(); }
};

struct Worker {
  std::unique_ptr<CoordinatorClient> client;
  coordinator::JoinResult joined;
};

// Joins ranks 0..n-1 concurrently; rank r on host "host<r / per_host>".
std::vector<Worker> JoinWorld(const Server& s, int n, int per_host, const std::string& token = "") {
  std::vector<std::future<Worker>> fs;
  for (int r = 0; r < n; ++r) {
    fs.push_back(std::async(std::launch::async, [&s, r, per_host, token] {
      Worker w;
      auto c = CoordinatorClient::Connect(s.target, token, 5000ms);
      EXPECT_TRUE(c.ok()) << c.status();
      w.client = std::move(*c);
      coordinator::JoinRequest req = test_support::TestJoinRequest(r);
      req.host_id = "host" + std::to_string(r / per_host);
      auto j = w.client->Join(req, 10000ms);
      EXPECT_TRUE(j.ok()) << j.status();
      if (j.ok()) w.joined = *j;
      return w;
    }));
  }
  std::vector<Worker> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

// A raw host stream (as psync-relay opens it).
struct HostStream {
  HostStream(const Server& s, const std::vector<int>& ranks, int64_t generation = 1) {
    stub = v1::Coordinator::NewStub(grpc::CreateChannel(s.target, grpc::InsecureChannelCredentials()));
    ctx.set_deadline(std::chrono::system_clock::now() + 20s);
    stream = stub->Train(&ctx);
    v1::TrainUp up;
    up.mutable_hello()->set_job_id("psync");
    up.mutable_hello()->set_generation(generation);
    for (int r : ranks) up.mutable_hello()->add_ranks(r);
    EXPECT_TRUE(stream->Write(up));
    this->ranks = ranks;
  }
  bool Batch(int64_t it, const std::vector<int>& who) {
    v1::TrainUp up;
    for (int r : who) {
      v1::Report* rep = up.mutable_report_batch()->add_reports();
      rep->set_rank(r);
      rep->set_iteration(it);
      rep->set_used_bitmap(AllUsed());
    }
    return stream->Write(up);
  }
  bool Batch(int64_t it) { return Batch(it, ranks); }
  bool Done(int rank) {
    v1::TrainUp up;
    up.mutable_done()->set_rank(rank);
    up.mutable_done()->set_exit_reason("completed");
    return stream->Write(up);
  }
  std::unique_ptr<v1::Coordinator::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::TrainUp, v1::Plan>> stream;
  std::vector<int> ranks;
};

TEST(HostStreamGrpc, OnePlanPerIterationPerHostStream) {
  Server s(4);
  auto ws = JoinWorld(s, 4, 2);
  HostStream a(s, {0, 1}), b(s, {2, 3});
  for (int64_t it = 0; it < 5; ++it) {
    ASSERT_TRUE(a.Batch(it));
    ASSERT_TRUE(b.Batch(it));
    v1::Plan pa, pb;
    ASSERT_TRUE(a.stream->Read(&pa));
    ASSERT_TRUE(b.stream->Read(&pb));
    EXPECT_EQ(pa.iteration(), it);
    EXPECT_EQ(pa.action(), v1::CONTINUE);
    EXPECT_EQ(pa.SerializeAsString(), pb.SerializeAsString());
  }
  // Done for every rank; then the half-close ends the streams cleanly and
  // no second copy of any plan was queued behind the ones read.
  for (int r : {0, 1}) ASSERT_TRUE(a.Done(r));
  for (int r : {2, 3}) ASSERT_TRUE(b.Done(r));
  a.stream->WritesDone();
  b.stream->WritesDone();
  v1::Plan extra;
  EXPECT_FALSE(a.stream->Read(&extra)) << "a second plan: iteration " << extra.iteration();
  EXPECT_FALSE(b.stream->Read(&extra));
  EXPECT_TRUE(a.stream->Finish().ok());
  EXPECT_TRUE(b.stream->Finish().ok());
  EXPECT_TRUE(WaitFor([&] { return s.State() == v1::JOB_FINISHED; }));
}

TEST(HostStreamGrpc, HostileHellosGetErrorsAndTheServerStaysUp) {
  Server s(4);
  auto ws = JoinWorld(s, 4, 2);
  auto refused = [&](const std::vector<int>& ranks, grpc::StatusCode code, const std::string& text) {
    HostStream h(s, ranks);
    h.stream->WritesDone();
    v1::Plan p;
    EXPECT_FALSE(h.stream->Read(&p));
    grpc::Status st = h.stream->Finish();
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_NE(st.error_message().find(text), std::string::npos) << st.error_message();
  };
  refused({0, 2}, grpc::StatusCode::INVALID_ARGUMENT, "hello.ranks mixes hosts");
  refused({0, 0}, grpc::StatusCode::INVALID_ARGUMENT, "names rank 0 twice");
  refused({4}, grpc::StatusCode::INVALID_ARGUMENT, "out of range");
  // A rank attached on its own stream cannot also be carried by a host stream.
  ASSERT_TRUE(ws[3].client->OpenTrainStream(3, 1).ok());
  ASSERT_TRUE(WaitFor([&] {
    v1::WorkersResponse w;
    s.srv->job().FillWorkers(&w);
    return w.workers(3).state() == v1::WORKER_TRAINING;
  }));
  refused({2, 3}, grpc::StatusCode::ALREADY_EXISTS, "rank 3");
  EXPECT_EQ(s.State(), v1::JOB_RUNNING);
  HostStream ok(s, {0, 1});
  HostStream two(s, {2});
  ASSERT_TRUE(ok.Batch(0));
  ASSERT_TRUE(two.Batch(0));
  ASSERT_TRUE(ws[3].client->SendReport({0, AllUsed(), 0, 0, {}}).ok());
  v1::Plan p;
  ASSERT_TRUE(ok.stream->Read(&p));
  EXPECT_EQ(p.iteration(), 0);
  auto p3 = ws[3].client->WaitPlan(0, 5000ms);
  ASSERT_TRUE(p3.ok()) << p3.status();
  EXPECT_EQ(p3->action, Action::kContinue);
}

TEST(HostStreamGrpc, ReportForARankNotOnTheStreamEndsItAndLosesItsRanks) {
  Server s(4);
  auto ws = JoinWorld(s, 4, 2);
  HostStream a(s, {0, 1}), b(s, {2, 3});
  ASSERT_TRUE(WaitFor([&] {  // b attached before a breaks the protocol (else b would find the job aborted)
    v1::WorkersResponse w;
    s.srv->job().FillWorkers(&w);
    return w.workers(2).state() == v1::WORKER_TRAINING && w.workers(3).state() == v1::WORKER_TRAINING;
  }));
  ASSERT_TRUE(a.Batch(0, {0, 2}));  // rank 2 is b's
  v1::Plan p;
  EXPECT_FALSE(a.stream->Read(&p));
  grpc::Status st = a.stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("report_batch report names rank 2, which is not one of this Train stream's ranks"),
            std::string::npos)
      << st.error_message();
  // Its ranks are lost together; the other host stream is told, once.
  ASSERT_TRUE(b.stream->Read(&p));
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_NE(p.reason().find("rank 0 ("), std::string::npos) << p.reason();
  EXPECT_NE(p.reason().find("rank 1 ("), std::string::npos) << p.reason();
  EXPECT_NE(p.reason().find("lost: host Train stream: protocol error: report_batch report names rank 2"),
            std::string::npos)
      << p.reason();
  EXPECT_EQ(s.State(), v1::JOB_ABORTED);
}

TEST(HostStreamGrpc, DroppedHostStreamAbortsNamingAllItsRanks) {
  Server s(4);
  auto ws = JoinWorld(s, 4, 2);
  HostStream b(s, {2, 3});
  ASSERT_TRUE(b.Batch(0));
  {
    HostStream a(s, {0, 1});
    ASSERT_TRUE(a.Batch(0));
    ASSERT_TRUE(WaitFor([&] {  // attached (a cancel before the hello is read attaches nothing)
      v1::WorkersResponse w;
      s.srv->job().FillWorkers(&w);
      return w.workers(0).last_iteration() == 0 && w.workers(1).last_iteration() == 0;
    }));
    a.ctx.TryCancel();
  }
  v1::Plan p;
  ASSERT_TRUE(b.stream->Read(&p));
  EXPECT_EQ(p.iteration(), 0);  // both hosts reported iteration 0
  ASSERT_TRUE(b.stream->Read(&p));
  EXPECT_EQ(p.action(), v1::ABORT);
  EXPECT_NE(p.reason().find("rank 0 ("), std::string::npos) << p.reason();
  EXPECT_NE(p.reason().find("rank 1 ("), std::string::npos) << p.reason();
  EXPECT_NE(p.reason().find("lost: host Train stream"), std::string::npos) << p.reason();
}

// ---------------------------------------------------------------- the relay

std::unique_ptr<relay::PlanRelay> StartRelay(const Server& s, int expect, const std::string& token = "",
                                             std::chrono::microseconds hold = 2000us) {
  relay::RelayOptions o;
  o.upstream = s.target;
  o.token = token;
  o.expect_ranks = expect;
  o.max_hold = hold;
  auto r = relay::PlanRelay::Start(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

std::string RelayTarget(const relay::PlanRelay& r) { return "127.0.0.1:" + std::to_string(r.port()); }

TEST(PlanRelay, CarriesAHostsRanksOnOneStreamWithOneBatchAndPlanPerIteration) {
  const std::string token = "relay-secret";
  Server s(2, token);
  auto relay = StartRelay(s, 2, token);
  auto ws = JoinWorld(s, 2, 2, token);
  for (auto& w : ws) {
    ASSERT_TRUE(w.client->UseTrainRelay(RelayTarget(*relay), 5000ms).ok());
    ASSERT_TRUE(w.client->OpenTrainStream(w.joined.rank, w.joined.generation).ok());
  }
  constexpr int kIters = 6;
  for (int it = 0; it < kIters; ++it) {
    for (auto& w : ws) ASSERT_TRUE(w.client->SendReport({it, AllUsed(), 0.5, 1.0, {}}).ok());
    for (auto& w : ws) {
      auto p = w.client->WaitPlan(it, 5000ms);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(p->iteration, it);
      EXPECT_EQ(p->action, Action::kContinue);
    }
  }
  relay::RelayStats st = relay->stats();
  EXPECT_EQ(st.upstream_streams, 1);
  EXPECT_EQ(st.plans_in, kIters) << "one plan per iteration for the host";
  EXPECT_EQ(st.plans_out, 2 * kIters);
  EXPECT_EQ(st.reports, 2 * kIters);
  // Both ranks report at once here, so normally one batch per iteration;
  // under load a rank can lag past the hold bound (then two).
  EXPECT_GE(st.report_batches, kIters);
  EXPECT_LE(st.report_batches, 2 * kIters);
  for (auto& w : ws) ASSERT_TRUE(w.client->SendDone("completed", 0).ok());
  EXPECT_TRUE(WaitFor([&] { return s.State() == v1::JOB_FINISHED; }));
  v1::WorkersResponse workers;
  s.srv->job().FillWorkers(&workers);
  for (const auto& w : workers.workers()) EXPECT_EQ(w.state(), v1::WORKER_DONE);
}

TEST(PlanRelay, AWorkerGoneWithoutDoneIsLostNamingIt) {
  Server s(2);
  auto relay = StartRelay(s, 2);
  auto ws = JoinWorld(s, 2, 2);
  for (auto& w : ws) {
    ASSERT_TRUE(w.client->UseTrainRelay(RelayTarget(*relay), 5000ms).ok());
    ASSERT_TRUE(w.client->OpenTrainStream(w.joined.rank, w.joined.generation).ok());
  }
  for (auto& w : ws) ASSERT_TRUE(w.client->SendReport({0, AllUsed(), 0, 0, {}}).ok());
  for (auto& w : ws) ASSERT_TRUE(w.client->WaitPlan(0, 5000ms).ok());
  ws[1].client->Close();  // rank 1 goes away without Done
  auto p = ws[0].client->WaitPlan(1, 5000ms);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->action, Action::kAbort);
  EXPECT_NE(p->reason.find("rank 1 ("), std::string::npos) << p->reason;
  EXPECT_NE(p->reason.find("lost: stream closed (relayed by psync-relay)"), std::string::npos) << p->reason;
  EXPECT_EQ(p->reason.find("rank 0 ("), std::string::npos) << p->reason;
  EXPECT_EQ(s.State(), v1::JOB_ABORTED);
}

TEST(PlanRelay, ALaggingRankDoesNotHoldTheOthersReportsBeyondTheBound) {
  Server s(2);
  auto relay = StartRelay(s, 2, "", 2000us);
  auto ws = JoinWorld(s, 2, 2);
  for (auto& w : ws) {
    ASSERT_TRUE(w.client->UseTrainRelay(RelayTarget(*relay), 5000ms).ok());
    ASSERT_TRUE(w.client->OpenTrainStream(w.joined.rank, w.joined.generation).ok());
  }
  ASSERT_TRUE(ws[0].client->SendReport({0, AllUsed(), 0.25, 3.0, {}}).ok());
  // Rank 0's report reaches the coordinator within the bound although rank 1 has not reported.
  EXPECT_TRUE(WaitFor([&] {
    v1::WorkersResponse w;
    s.srv->job().FillWorkers(&w);
    return w.workers(0).last_iteration() == 0;
  }));
  EXPECT_EQ(relay->stats().report_batches, 1);
  ASSERT_TRUE(ws[1].client->SendReport({0, AllUsed(), 0, 0, {}}).ok());
  for (auto& w : ws) {
    auto p = w.client->WaitPlan(0, 5000ms);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->action, Action::kContinue);
  }
  EXPECT_EQ(relay->stats().report_batches, 2);
  EXPECT_EQ(relay->stats().plans_in, 1);
}

TEST(PlanRelay, RefusesAWrongTokenAndNonWorkerCalls) {
  Server s(1, "t0k");
  auto relay = StartRelay(s, 1, "t0k");
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(RelayTarget(*relay), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer wrong");
    auto st = stub->Train(&ctx);
    v1::TrainUp up;
    up.mutable_hello()->set_job_id("psync");
    st->Write(up);
    st->WritesDone();
    v1::Plan p;
    EXPECT_FALSE(st->Read(&p));
    EXPECT_EQ(st->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {  // a host hello is not a worker's
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer t0k");
    auto st = stub->Train(&ctx);
    v1::TrainUp up;
    up.mutable_hello()->set_job_id("psync");
    up.mutable_hello()->add_ranks(0);
    st->Write(up);
    st->WritesDone();
    v1::Plan p;
    EXPECT_FALSE(st->Read(&p));
    EXPECT_EQ(st->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {  // Join goes to the coordinator, not the relay
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer t0k");
    v1::JoinResponse resp;
    EXPECT_EQ(stub->Join(&ctx, v1::JoinRequest(), &resp).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
}

TEST(PlanRelay, UnreachableCoordinatorEndsTheWorkersStreamsNamingIt) {
  // A coordinator that is gone: the relay's upstream stream fails and the
  // worker's stream ends UNAVAILABLE (the worker exits 5, as without the relay).
  relay::RelayOptions o;
  o.upstream = "127.0.0.1:1";
  o.expect_ranks = 1;
  auto relay = relay::PlanRelay::Start(o);
  ASSERT_TRUE(relay.ok()) << relay.status();
  auto c = CoordinatorClient::Connect(RelayTarget(**relay), "", 5000ms);  // any reachable target for the channel
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->UseTrainRelay(RelayTarget(**relay), 5000ms).ok());
  ASSERT_TRUE((*c)->OpenTrainStream(0, 1).ok());
  auto p = (*c)->WaitPlan(0, 10000ms);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable) << p.status();
  EXPECT_NE(p.status().message().find("via the plan relay at"), std::string::npos) << p.status();
}


// ---- Garbage on a Train stream (issue 25 item 2): bytes that do not decode
// after a valid hello are a protocol error, not a clean close.

// A raw Train stream (raw_grpc.h): the final status.
grpc::Status RawTrainStream(const std::string& target, const std::vector<std::string>& messages,
                            const std::string& token = "") {
  return test_support::RawStream(target, "/psync.v1.Coordinator/Train", messages, token);
}

std::string HelloBytes(int rank, int64_t generation) {
  v1::TrainUp up;
  up.mutable_hello()->set_job_id("psync");
  up.mutable_hello()->set_rank(rank);
  up.mutable_hello()->set_generation(generation);
  return up.SerializeAsString();
}

// Ten continuation bytes: a varint that never ends, so no protobuf message.
const std::string kGarbage(10, '\xff');

TEST(HostStreamGrpc, GarbageAfterHelloIsAProtocolErrorNamingTheRank) {
  Server s(2, "tok");
  auto ws = JoinWorld(s, 2, 1, "tok");
  ASSERT_TRUE(ws[0].client->OpenTrainStream(0, ws[0].joined.generation).ok());
  // Rank 0 attached first, so the loss reaches it as an ABORT plan.
  ASSERT_TRUE(WaitFor([&] {
    v1::WorkersResponse w;
    s.srv->job().FillWorkers(&w);
    return w.workers_size() == 2 && w.workers(0).train_stream() > 0;
  }));
  const grpc::Status st = RawTrainStream(s.target, {HelloBytes(1, ws[1].joined.generation), kGarbage}, "tok");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("undecodable message"), std::string::npos) << st.error_message();
  auto p = ws[0].client->WaitPlan(0, 5000ms);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->action, Action::kAbort);
  EXPECT_NE(p->reason.find("rank 1 ("), std::string::npos) << p->reason;
  EXPECT_NE(p->reason.find("protocol error: undecodable message"), std::string::npos) << p->reason;
  EXPECT_EQ(s.State(), v1::JOB_ABORTED);
}

TEST(HostStreamGrpc, GarbageInsteadOfHelloIsRefused) {
  Server s(1);
  const grpc::Status st = RawTrainStream(s.target, {kGarbage});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("undecodable message"), std::string::npos) << st.error_message();
  EXPECT_EQ(s.State(), v1::JOB_WAITING);  // nothing attached, nothing lost
}

TEST(PlanRelay, GarbageFromAWorkerIsAProtocolErrorNamingTheRank) {
  Server s(2, "tok");
  auto relay = StartRelay(s, 2, "tok");
  auto ws = JoinWorld(s, 2, 2, "tok");
  ASSERT_TRUE(ws[0].client->UseTrainRelay(RelayTarget(*relay), 5000ms).ok());
  ASSERT_TRUE(ws[0].client->OpenTrainStream(0, ws[0].joined.generation).ok());
  const grpc::Status st =
      RawTrainStream(RelayTarget(*relay), {HelloBytes(1, ws[1].joined.generation), kGarbage}, "tok");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("undecodable message"), std::string::npos) << st.error_message();
  auto p = ws[0].client->WaitPlan(0, 10000ms);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->action, Action::kAbort);
  EXPECT_NE(p->reason.find("rank 1 ("), std::string::npos) << p->reason;
  EXPECT_NE(p->reason.find("protocol error: undecodable message"), std::string::npos) << p->reason;
}

}  // namespace
}  // namespace psync
