// The coordinator's secure defaults, against the real binaries:
//  - a non-loopback --host without a token is refused (exit 2, saying how to
//    fix it) unless --allow-unauthenticated; with a token it serves;
//  - gRPC reflection is off unless --reflection; health checks always work;
//  - psync-launch makes a random token for its job: psyncctl without it is
//    refused, with it (from the token file it prints) allowed, and Ctrl-C
//    still stops the job through the coordinator.
// Token comparison itself: server_unit_test (TokenEquals) and
// coordinator_integration_test (WrongTokenIsUnauthenticated, BadTokenOn...).
#include <signal.h>

#include <gtest/gtest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <regex>
#include <thread>
#include <sstream>

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

// Starts psync-coordinator with `flags` on port 0; returns its port (0 if it
// did not come up; the log is in the failure message).
int StartCoordinator(BackgroundProcess** out, const test_support::TempDir& dir, const std::string& name,
                     const std::vector<std::string>& flags, const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv = {PSYNC_COORDINATOR_PATH, "--world-size=1", "--port=0",
                                   "--port-file=" + dir.File(name + ".port")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  *out = new BackgroundProcess(argv, dir.File(name + ".log"), env);
  if (!(*out)->WaitForOutput([](const std::string& s) { return s.find("listening on") != std::string::npos; })) {
    ADD_FAILURE() << name << " did not start: " << (*out)->Output();
    return 0;
  }
  return std::stoi(ReadFile(dir.File(name + ".port")));
}

// One generic call (raw bytes) on a fresh channel: the status and, for a
// bidi method, the first response.
struct RawResult {
  grpc::Status status;
  std::string response;
};

RawResult RawUnary(const std::string& target, const std::string& method, const std::string& request) {
  auto ch = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  grpc::CompletionQueue cq;
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  RawResult out;
  auto call = stub.PrepareUnaryCall(&ctx, method, req, &cq);
  call->StartCall();
  call->Finish(&resp, &out.status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  cq.Next(&tag, &ok);
  std::vector<grpc::Slice> slices;
  if (out.status.ok() && resp.Dump(&slices).ok()) {
    for (auto& s : slices) out.response.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return out;
}

RawResult RawBidiFirst(const std::string& target, const std::string& method, const std::string& request) {
  auto ch = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, method, &cq);
  void* tag;
  bool ok;
  auto step = [&](int t) {
    cq.Next(&tag, &ok);
    EXPECT_EQ(tag, reinterpret_cast<void*>(static_cast<intptr_t>(t)));
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  call->Write(req, reinterpret_cast<void*>(2));
  step(2);
  call->WritesDone(reinterpret_cast<void*>(3));
  step(3);
  RawResult out;
  call->Read(&resp, reinterpret_cast<void*>(4));
  if (step(4)) {
    std::vector<grpc::Slice> slices;
    if (resp.Dump(&slices).ok()) {
      for (auto& s : slices) out.response.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    ctx.TryCancel();  // got the answer; the status does not matter then
  }
  call->Finish(&out.status, reinterpret_cast<void*>(5));
  step(5);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return out;
}

const char kReflection[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
const std::string kListServices("\x3a\x00", 2);  // ServerReflectionRequest{list_services: ""}

TEST(SecureDefaults, NonLoopbackWithoutTokenIsRefused) {
  test_support::SpawnResult r = test_support::SpawnAndCapture(
      {PSYNC_COORDINATOR_PATH, "--world-size=1", "--port=0", "--host=0.0.0.0"}, 30s);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("refusing to serve on 0.0.0.0 without a token"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--allow-unauthenticated"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PSYNC_TOKEN"), std::string::npos) << r.output;

  test_support::TempDir dir("psync-secure");
  BackgroundProcess* with_token = nullptr;
  const int p1 = StartCoordinator(&with_token, dir, "token", {"--host=0.0.0.0"}, {"PSYNC_TOKEN=t0ken"});
  std::unique_ptr<BackgroundProcess> a(with_token);
  EXPECT_GT(p1, 0);
  // The job line is logged after the port file is written: wait for it.
  EXPECT_TRUE(a->WaitForOutput([](const std::string& o) { return o.find("token required") != std::string::npos; },
                               10s))
      << a->Output();

  BackgroundProcess* open = nullptr;
  const int p2 = StartCoordinator(&open, dir, "open", {"--host=0.0.0.0", "--allow-unauthenticated"});
  std::unique_ptr<BackgroundProcess> b(open);
  EXPECT_GT(p2, 0);
  EXPECT_TRUE(b->WaitForOutput([](const std::string& o) { return o.find("no token") != std::string::npos; }, 10s))
      << b->Output();
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

TEST(SecureDefaults, ReflectionOnlyWithFlagHealthAlways) {
  test_support::TempDir dir("psync-secure");
  BackgroundProcess* plain = nullptr;
  const int port = StartCoordinator(&plain, dir, "plain", {"--host=127.0.0.1"});
  std::unique_ptr<BackgroundProcess> a(plain);
  ASSERT_GT(port, 0);
  const std::string target = "127.0.0.1:" + std::to_string(port);
  RawResult refl = RawBidiFirst(target, kReflection, kListServices);
  EXPECT_EQ(refl.status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << refl.status.error_message();
  // grpc.health.v1.Health/Check{service: ""} -> {status: SERVING (1)}
  RawResult health = RawUnary(target, "/grpc.health.v1.Health/Check", "");
  EXPECT_TRUE(health.status.ok()) << health.status.error_message();
  EXPECT_EQ(health.response, std::string("\x08\x01", 2));

  BackgroundProcess* with = nullptr;
  const int port2 = StartCoordinator(&with, dir, "refl", {"--host=127.0.0.1", "--reflection"});
  std::unique_ptr<BackgroundProcess> b(with);
  ASSERT_GT(port2, 0);
  RawResult on = RawBidiFirst("127.0.0.1:" + std::to_string(port2), kReflection, kListServices);
  EXPECT_NE(on.response.find("psync.v1.Coordinator"), std::string::npos)
      << on.status.error_code() << " " << on.status.error_message();
  EXPECT_NE(on.response.find("psync.v1.Control"), std::string::npos);
}

TEST(SecureDefaults, LaunchMakesARandomTokenForItsJob) {
  test_support::TempDir dir("psync-secure");
  BackgroundProcess launch({PSYNC_LAUNCH_PATH, "--nproc=2", "--", "--steps=1000000", "--quiet",
                            "--widths=4,4"},
                           dir.File("launch.log"), {"PSYNC_TOKEN="});
  ASSERT_TRUE(launch.WaitForOutput([](const std::string& s) { return s.find("starting 2 worker") != std::string::npos; }))
      << launch.Output();
  std::smatch m;
  const std::string out = launch.Output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex("coordinator (127\\.0\\.0\\.1:[0-9]+) \\(pid [0-9]+; token in ([^)]+)\\)")))
      << out;
  const std::string target = m[1], token_file = m[2];
  const std::string token = ReadFile(token_file);
  EXPECT_EQ(token.size(), 64u) << "32 random bytes as hex";
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos);
  // Wait for training to be under way (both ranks joined).
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  std::string status;
  while (std::chrono::steady_clock::now() < deadline) {
    test_support::SpawnResult st = test_support::SpawnAndCapture(
        {"env", "PSYNC_TOKEN=" + token, PSYNCCTL_PATH, "--coordinator=" + target, "--json", "status"}, 30s);
    status = st.output;
    if (st.code == 0 && status.find("\"state\":\"JOB_RUNNING\"") != std::string::npos) break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_NE(status.find("\"state\":\"JOB_RUNNING\""), std::string::npos) << status;
  test_support::SpawnResult no_token = test_support::SpawnAndCapture(
      {"env", "PSYNC_TOKEN=", PSYNCCTL_PATH, "--coordinator=" + target, "shutdown"}, 30s);
  EXPECT_EQ(no_token.code, 1) << no_token.output;
  EXPECT_NE(no_token.output.find("requires a token"), std::string::npos) << no_token.output;
  test_support::SpawnResult wrong = test_support::SpawnAndCapture(
      {"env", "PSYNC_TOKEN=" + token + "0", PSYNCCTL_PATH, "--coordinator=" + target, "shutdown"}, 30s);
  EXPECT_EQ(wrong.code, 1) << wrong.output;
  EXPECT_NE(wrong.output.find("invalid token"), std::string::npos) << wrong.output;
  // Ctrl-C: the launcher stops the job through the coordinator with its token.
  kill(launch.pid(), SIGINT);
  EXPECT_EQ(launch.Wait(60s), 0) << launch.Output();
  EXPECT_NE(launch.Output().find("rank 0: exit 0, rank 1: exit 0; exit 0"), std::string::npos) << launch.Output();
}

}  // namespace
}  // namespace psync
