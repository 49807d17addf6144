// Coordinator liveness and TLS over real sockets (server in-process on
// 127.0.0.1:0):
//  - a rank whose messages stop (stream open, no heartbeats) is declared lost,
//    and a rank that heartbeats while blocked without reporting is not blamed;
//  - TLS: a client with the CA connects, a plaintext client and a client with
//    a missing CA file fail with clear errors. The certificate is generated
//    at test time with the openssl CLI (the test skips when it is absent).
// Subprocesses are started with posix_spawn (never fork: gRPC runs here).
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "psync/v1/control.grpc.pb.h"
#include "psync/v1/coordinator.grpc.pb.h"
#include "common/refusal_counters.h"
#include "server/coordinator_server.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/integration/coordinator/coordinator_test_util.h"
#include "worker/control/coordinator_client.h"

namespace psync {
namespace {

using namespace std::chrono_literals;
using control::CoordinatorClient;
using control::PlanAction;
using test_support::AllUsed;
using test_support::kParams;
using test_support::WaitPlan;

std::unique_ptr<server::CoordinatorServer> StartServer(std::chrono::milliseconds report,
                                                       std::chrono::milliseconds heartbeat = 0ms,
                                                       const std::string& cert = "", const std::string& key = "",
                                                       const std::string& token = "") {
  server::ServerOptions o = test_support::TestServerOptions(2, report);
  o.job.heartbeat_timeout = heartbeat;
  o.tls_cert_pem = cert;
  o.tls_key_pem = key;
  o.token = token;
  auto s = server::CoordinatorServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

control::JoinRequest Req(int rank) { return test_support::TestJoinRequest(rank); }

v1::JoinRequest RawReq(int rank) {
  v1::JoinRequest r;
  r.set_job_id("psync");
  r.set_requested_rank(rank);
  r.set_hostname("silent");
  r.set_pid(4242);
  r.set_device("cpu");
  r.set_backend("gloo");
  r.set_bucket_cap_bytes(16);
  r.set_first_bucket_cap_bytes(8);
  for (int i = 0; i < kParams; ++i) {
    auto* p = r.add_manifest();
    p->set_name("p" + std::to_string(i));
    p->add_shape(1);
    p->set_element_size(4);
  }
  return r;
}

// A worker that speaks the protocol by hand and never heartbeats: after its
// last report it keeps the Train stream open and sends nothing (like a
// process whose link was cut without a TCP reset).
struct SilentWorker {
  std::shared_ptr<grpc::Channel> ch;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::TrainUp, v1::Plan>> stream;

  explicit SilentWorker(const std::string& target)
      : ch(grpc::CreateChannel(target, grpc::InsecureChannelCredentials())),
        stub(v1::Coordinator::NewStub(ch)) {}
  ~SilentWorker() {
    ctx.TryCancel();
    if (stream) stream->Finish();
  }
  absl::StatusOr<v1::JoinResponse> Join(int rank) {
    grpc::ClientContext jctx;
    jctx.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::JoinResponse resp;
    grpc::Status st = stub->Join(&jctx, RawReq(rank), &resp);
    if (!st.ok()) return absl::UnknownError(st.error_message());
    return resp;
  }
  bool Open(int rank, int64_t generation) {
    stream = stub->Train(&ctx);
    v1::TrainUp up;
    up.mutable_hello()->set_job_id("psync");
    up.mutable_hello()->set_rank(rank);
    up.mutable_hello()->set_generation(generation);
    return stream->Write(up);
  }
  bool Report(int64_t it) {
    v1::TrainUp up;
    up.mutable_report()->set_iteration(it);
    up.mutable_report()->set_used_bitmap(AllUsed());
    return stream->Write(up);
  }
};

v1::WorkersResponse Workers(const std::string& target) {
  auto stub = v1::Control::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  v1::WorkersResponse w;
  EXPECT_TRUE(stub->Workers(&ctx, v1::WorkersRequest(), &w).ok());
  return w;
}

// Rank 0 (a real client, which heartbeats from its own thread) and rank 1
// (`silent`) join, open their streams and finish iteration 0. Afterwards
// neither reports iteration 1: rank 0 is "blocked in the collective" but its
// client heartbeats, rank 1 is silent.
void JoinAndFinishIterationZero(const std::string& target, SilentWorker& silent,
                                std::unique_ptr<CoordinatorClient>* client,
                                std::shared_ptr<control::PlanMailbox>* plans,
                                std::chrono::milliseconds* heartbeat_interval) {
  auto silent_join = std::async(std::launch::async, [&] { return silent.Join(1); });
  auto c = CoordinatorClient::Connect(target, "", 5000ms);
  ASSERT_TRUE(c.ok()) << c.status();
  auto joined = (*c)->Join(Req(0), 10000ms);
  ASSERT_TRUE(joined.ok()) << joined.status();
  *heartbeat_interval = joined->heartbeat_interval;
  auto sj = silent_join.get();
  ASSERT_TRUE(sj.ok()) << sj.status();
  ASSERT_TRUE(silent.Open(1, sj->generation()));
  *plans = std::make_shared<control::PlanMailbox>();
  ASSERT_TRUE((*c)->OpenTrainStream(0, joined->generation, *plans).ok());
  ASSERT_TRUE(silent.Report(0));
  ASSERT_TRUE((*c)->SendReport({0, AllUsed(), 0, 0, {}}).ok());
  auto p0 = WaitPlan(**plans, 0, 5000ms);
  ASSERT_TRUE(p0.ok()) << p0.status();
  ASSERT_EQ(p0->action, PlanAction::kContinue);
  *client = std::move(*c);
}

TEST(CoordinatorLiveness, SilentRankLostBeforeBlockedHeartbeatingRank) {
  // Report timeout 4 s; heartbeat timeout min(5 s, 4 s / 2) = 2 s.
  auto srv = StartServer(4000ms);
  ASSERT_TRUE(srv);
  const std::string target = "127.0.0.1:" + std::to_string(srv->port());
  SilentWorker silent(target);
  std::unique_ptr<CoordinatorClient> c;
  std::shared_ptr<control::PlanMailbox> plans;
  std::chrono::milliseconds heartbeat_interval{0};
  ASSERT_NO_FATAL_FAILURE(JoinAndFinishIterationZero(target, silent, &c, &plans, &heartbeat_interval));
  EXPECT_EQ(heartbeat_interval, 500ms);
  const auto t0 = std::chrono::steady_clock::now();
  auto p1 = WaitPlan(*plans, 1, 10000ms);
  const auto dt = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(p1.ok()) << p1.status();
  EXPECT_EQ(p1->action, PlanAction::kAbort);
  EXPECT_NE(p1->reason.find("rank 1 (silent:4242) lost: no message"), std::string::npos) << p1->reason;
  EXPECT_LT(dt, 3800ms) << "the silent rank must be found by the heartbeat timeout, before the report timeout";
  bool saw0 = false, saw1 = false;
  const v1::WorkersResponse workers = Workers(target);
  for (const auto& w : workers.workers()) {
    if (w.rank() == 0) {
      saw0 = true;
      EXPECT_NE(w.state(), v1::WORKER_LOST) << w.exit_reason();
    }
    if (w.rank() == 1) {
      saw1 = true;
      EXPECT_EQ(w.state(), v1::WORKER_LOST);
    }
  }
  EXPECT_TRUE(saw0 && saw1);
}

TEST(CoordinatorLiveness, HeartbeatingRankOutlivesReportTimeoutWhileAnotherIsQuiet) {
  // Heartbeat timeout (4 s, interval 1 s) longer than the report timeout
  // (2.5 s): at the report deadline the silent rank is already quiet (two
  // heartbeats missed), so the heartbeating rank is not blamed; the silent
  // one is, at the heartbeat timeout.
  auto srv = StartServer(2500ms, 4000ms);
  ASSERT_TRUE(srv);
  const std::string target = "127.0.0.1:" + std::to_string(srv->port());
  SilentWorker silent(target);
  std::unique_ptr<CoordinatorClient> c;
  std::shared_ptr<control::PlanMailbox> plans;
  std::chrono::milliseconds heartbeat_interval{0};
  ASSERT_NO_FATAL_FAILURE(JoinAndFinishIterationZero(target, silent, &c, &plans, &heartbeat_interval));
  const auto t0 = std::chrono::steady_clock::now();
  auto p1 = WaitPlan(*plans, 1, 10000ms);
  const auto dt = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(p1.ok()) << p1.status();
  EXPECT_EQ(p1->action, PlanAction::kAbort);
  EXPECT_NE(p1->reason.find("rank 1 (silent:4242) lost: no message"), std::string::npos) << p1->reason;
  EXPECT_GT(dt, 3000ms) << "past the report timeout, at the heartbeat timeout";
}

// ---------------------------------------------------------------- TLS

// Exit code of argv (a name on PATH or a path), output discarded; -1 when it
// could not start, died of a signal, or ran past 60 s (then it is killed).
int RunCmd(const std::vector<std::string>& argv) {
  return test_support::SpawnAndCapture(argv, std::chrono::seconds(60)).code;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A self-signed certificate for localhost / 127.0.0.1 in `dir` (cert.pem, key.pem).
bool MakeCert(const std::string& dir) {
  return RunCmd({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/key.pem", "-out",
                 dir + "/cert.pem", "-days", "1", "-subj", "/CN=localhost", "-addext",
                 "subjectAltName=DNS:localhost,IP:127.0.0.1"}) == 0;
}

TEST(CoordinatorTls, CaClientConnectsPlaintextAndMissingCaFail) {
  if (RunCmd({"openssl", "version"}) != 0) GTEST_SKIP() << "openssl CLI not found: cannot generate a test certificate";
  test_support::TempDir tmp("psync-tls-test");
  const std::string dir = tmp.path();
  const std::string cert = dir + "/cert.pem", key = dir + "/key.pem";
  ASSERT_TRUE(MakeCert(dir));
  auto srv = StartServer(10000ms, 0ms, ReadAll(cert), ReadAll(key));
  ASSERT_TRUE(srv);
  const std::string target = "127.0.0.1:" + std::to_string(srv->port());

  // With the CA: connects, and the protocol works (Join blocks for the world,
  // so a world of 2 joins from two clients).
  auto a = CoordinatorClient::Connect(target, "", 5000ms, cert);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = CoordinatorClient::Connect(target, "", 5000ms, cert);
  ASSERT_TRUE(b.ok()) << b.status();
  auto jb = std::async(std::launch::async, [&] { return (*b)->Join(Req(1), 10000ms); });
  auto ja = (*a)->Join(Req(0), 10000ms);
  ASSERT_TRUE(ja.ok()) << ja.status();
  ASSERT_TRUE(jb.get().ok());

  // Plaintext against the TLS server: Unavailable, naming the fix.
  auto plain = CoordinatorClient::Connect(target, "", 1500ms);
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(plain.status().message()).find("--tls-ca"), std::string::npos) << plain.status();

  // Missing / non-PEM CA file: InvalidArgument naming the file.
  auto missing = CoordinatorClient::Connect(target, "", 1500ms, dir + "/nope.pem");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(missing.status().message()).find("nope.pem' cannot be read"), std::string::npos)
      << missing.status();
  auto not_pem = CoordinatorClient::Connect(target, "", 1500ms, key);
  ASSERT_FALSE(not_pem.ok());
  EXPECT_EQ(not_pem.status().code(), absl::StatusCode::kInvalidArgument) << not_pem.status();

#ifdef PSYNCCTL_PATH
  EXPECT_EQ(RunCmd({PSYNCCTL_PATH, "--coordinator=" + target, "--tls-ca=" + cert, "status"}), 0);
  EXPECT_EQ(RunCmd({PSYNCCTL_PATH, "--coordinator=" + target, "--timeout=2", "status"}), 1);
  EXPECT_EQ(RunCmd({PSYNCCTL_PATH, "--coordinator=" + target, "--tls-ca=" + dir + "/nope.pem", "status"}), 2);
#endif
  srv->Shutdown();
}

// The token gate (common/token_gate.h) on TLS as on plaintext: a call
// without the token is refused before it is read, and counted.
TEST(CoordinatorTls, TheTokenGateRefusesOverTlsToo) {
  if (RunCmd({"openssl", "version"}) != 0) GTEST_SKIP() << "openssl CLI not found: cannot generate a test certificate";
  test_support::TempDir tmp("psync-tls-test");
  const std::string dir = tmp.path();
  ASSERT_TRUE(MakeCert(dir));
  auto srv = StartServer(10000ms, 0ms, ReadAll(dir + "/cert.pem"), ReadAll(dir + "/key.pem"), "tls-t0k");
  ASSERT_TRUE(srv);
  const std::string target = "127.0.0.1:" + std::to_string(srv->port());
  auto no_token = CoordinatorClient::Connect(target, "", 5000ms, dir + "/cert.pem");
  ASSERT_TRUE(no_token.ok()) << no_token.status();
  auto j = (*no_token)->Join(Req(0), 5000ms);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kUnauthenticated) << j.status();
  ASSERT_NE(srv->refusals(), nullptr);
  EXPECT_EQ(srv->refusals()->Of("/psync.v1.Coordinator/Join"), 1u);
#ifdef PSYNCCTL_PATH
  EXPECT_NE(RunCmd({PSYNCCTL_PATH, "--coordinator=" + target, "--tls-ca=" + dir + "/cert.pem", "status"}), 0);
  EXPECT_EQ(srv->refusals()->Of("/psync.v1.Control/Status"), 1u);
  EXPECT_EQ(RunCmd({PSYNCCTL_PATH, "--coordinator=" + target, "--tls-ca=" + dir + "/cert.pem", "--token=tls-t0k",
                    "status"}),
            0);
#endif
  srv->Shutdown();
}

// A second coordinator on a port in use is refused (gRPC would otherwise
// share the port through SO_REUSEPORT and split the workers between them).
TEST(CoordinatorPort, ASecondCoordinatorOnAPortInUseIsRefused) {
  test_support::TestServer first(test_support::TestServerOptions(2, std::chrono::milliseconds(5000)));
  ASSERT_NE(first.srv, nullptr);
  server::ServerOptions o = test_support::TestServerOptions(2, std::chrono::milliseconds(5000));
  o.port = first.srv->port();
  absl::StatusOr<std::unique_ptr<server::CoordinatorServer>> second = server::CoordinatorServer::Start(o);
  EXPECT_FALSE(second.ok()) << "a second coordinator started on port " << o.port;
}

}  // namespace
}  // namespace psync
