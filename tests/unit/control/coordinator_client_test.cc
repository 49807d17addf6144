// CoordinatorClient (worker/control/coordinator_client.h) against a real
// coordinator in this process (server/coordinator_server.h on 127.0.0.1, a
// free port): Join and the bootstrap store, a report and its plan, a refused
// Join keeps the coordinator's code and says who refused it, and a
// coordinator that goes away fails the Train stream and every later call.
#include "worker/control/coordinator_client.h"

#include <gtest/gtest.h>

#include <future>

#include "psync/common/exit_code.h"
#include "common/used_bitmap.h"
#include "tests/integration/coordinator/coordinator_test_util.h"

namespace psync::control {
namespace {

using namespace std::chrono_literals;
using test_support::TestJoinRequest;
using test_support::TestServer;
using test_support::TestServerOptions;

server::ServerOptions Options(int world, const std::string& token = "") {
  server::ServerOptions o = TestServerOptions(world, 10000ms);
  o.token = token;
  return o;
}

std::unique_ptr<CoordinatorClient> Connect(const std::string& target, const std::string& token = "") {
  auto c = CoordinatorClient::Connect(target, token, 5000ms);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(CoordinatorClient, JoinsAndRoundTripsAReportAndItsPlan) {
  TestServer s(Options(2, "s3cret"));
  ASSERT_TRUE(s.srv);
  std::unique_ptr<CoordinatorClient> c[2] = {Connect(s.target, "s3cret"), Connect(s.target, "s3cret")};
  ASSERT_TRUE(c[0] && c[1]);
  auto j1 = std::async(std::launch::async, [&] { return c[1]->Join(TestJoinRequest(1), 10s); });
  absl::StatusOr<JoinResult> j0 = c[0]->Join(TestJoinRequest(0), 10s);
  absl::StatusOr<JoinResult> j1r = j1.get();
  ASSERT_TRUE(j0.ok()) << j0.status();
  ASSERT_TRUE(j1r.ok()) << j1r.status();
  EXPECT_EQ(j0->rank, 0);
  EXPECT_EQ(j1r->rank, 1);
  EXPECT_EQ(j0->world_size, 2);
  EXPECT_EQ(j0->generation, 1);
  EXPECT_EQ(j0->store_prefix, j1r->store_prefix);
  EXPECT_FALSE(j0->initial_bucket_plan.empty());

  // The bootstrap store, through the same client (the token travels on every call).
  ASSERT_TRUE(c[0]->StoreSet(j0->store_prefix + "k", "v").ok());
  absl::StatusOr<std::string> got = c[1]->StoreGet(j0->store_prefix + "k", 5s);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");

  std::shared_ptr<PlanMailbox> plans[2] = {std::make_shared<PlanMailbox>(), std::make_shared<PlanMailbox>()};
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(c[r]->OpenTrainStream(r, 1, plans[r]).ok());
    std::vector<uint8_t> used(test_support::kParams, 1);
    used[4] = 0;           // unused on every rank
    used[5] = r == 0;      // used on rank 0 only: still used
    ASSERT_TRUE(c[r]->SendReport({0, bitmap::Pack(used), 1.0, 2.0, {}, 0}).ok());
  }
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<IterationPlan> p = plans[r]->Wait(0, 10s);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->action, PlanAction::kContinue);
    ASSERT_EQ(p->globally_unused.size(), static_cast<size_t>(test_support::kParams)) << "decoded for the manifest";
    for (int i = 0; i < test_support::kParams; ++i) EXPECT_EQ(p->globally_unused[i], i == 4) << i;
  }
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(c[r]->SendDone("completed", 0).ok());
  EXPECT_TRUE(test_support::WaitFor([&] { return s.srv->job().state() == v1::JOB_FINISHED; }));
}

TEST(CoordinatorClient, ARefusedJoinKeepsTheCoordinatorsCodeAndNamesIt) {
  TestServer s(Options(1, "s3cret"));
  ASSERT_TRUE(s.srv);
  auto wrong_job = Connect(s.target, "s3cret");
  ASSERT_TRUE(wrong_job);
  JoinRequest req = TestJoinRequest(0);
  req.job_id = "other";
  absl::StatusOr<JoinResult> j = wrong_job->Join(req, 5s);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kFailedPrecondition) << j.status();
  EXPECT_NE(std::string(j.status().message()).find("Join refused by coordinator at " + s.target), std::string::npos)
      << j.status();

  auto no_token = Connect(s.target, "wrong");
  ASSERT_TRUE(no_token);
  j = no_token->Join(TestJoinRequest(0), 5s);
  EXPECT_EQ(j.status().code(), absl::StatusCode::kUnauthenticated) << j.status();
}

TEST(CoordinatorClient, ACoordinatorThatGoesAwayFailsTheStreamAndLaterCalls) {
  TestServer s(Options(1));
  ASSERT_TRUE(s.srv);
  auto c = Connect(s.target);
  ASSERT_TRUE(c);
  absl::StatusOr<JoinResult> j = c->Join(TestJoinRequest(0), 5s);
  ASSERT_TRUE(j.ok()) << j.status();
  auto plans = std::make_shared<PlanMailbox>();
  ASSERT_TRUE(c->OpenTrainStream(0, j->generation, plans).ok());
  ASSERT_TRUE(c->SendReport({0, test_support::AllUsed(), 1.0, 2.0, {}, 0}).ok());
  ASSERT_TRUE(plans->Wait(0, 10s).ok());

  s.srv.reset();  // shuts down: the job is aborted, the streams end, the port closes
  const absl::Status failed = plans->WaitForFailure(10s);
  ASSERT_FALSE(failed.ok()) << "the Train stream outlived its coordinator";
  EXPECT_NE(std::string(failed.message()).find("coordinator shutting down"), std::string::npos) << failed;
  EXPECT_TRUE(ExitCodeIn(failed).has_value()) << failed;

  const absl::Status set = c->StoreSet("k", "v");
  EXPECT_EQ(set.code(), absl::StatusCode::kUnavailable) << set;
  EXPECT_NE(std::string(set.message()).find("coordinator at " + s.target + " unreachable (StoreSet 'k')"),
            std::string::npos)
      << set;
  EXPECT_FALSE(c->SendReport({1, test_support::AllUsed(), 1.0, 2.0, {}, 0}).ok());
  c->Close();
}

}  // namespace
}  // namespace psync::control
