// CoordinatorStore (comm::Store over the coordinator's StoreSet/StoreGet)
// against a real in-process coordinator on 127.0.0.1: keys get the job's
// prefix, Get waits for a later Set, and errors name the key.
#include "worker/control/coordinator_store.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "server/coordinator_server.h"
#include "server/kv_store.h"
#include "tests/integration/coordinator/coordinator_test_util.h"

namespace psync {
namespace {

using namespace std::chrono_literals;

TEST(CoordinatorStore, PrefixesKeysAndWaitsForSet) {
  auto srv = server::CoordinatorServer::Start(test_support::TestServerOptions(1, 10000ms));
  ASSERT_TRUE(srv.ok()) << srv.status();
  const std::string target = "127.0.0.1:" + std::to_string((*srv)->port());
  auto ca = control::CoordinatorClient::Connect(target, "", 5000ms);
  auto cb = control::CoordinatorClient::Connect(target, "", 5000ms);
  ASSERT_TRUE(ca.ok() && cb.ok());
  control::CoordinatorStore a(ca->get(), "psync/g1-7/");
  control::CoordinatorStore b(cb->get(), "psync/g1-7/");
  control::CoordinatorStore other(cb->get(), "psync/g2-9/");

  ASSERT_TRUE(a.Set("rank0", std::string("addr\0bytes", 10)).ok());
  auto raw = (*cb)->StoreGet("psync/g1-7/rank0", 1000ms);  // the prefix is really on the wire
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(*raw, std::string("addr\0bytes", 10));
  auto got = b.Get("rank0", 1000ms);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, *raw);

  auto waiting = std::async(std::launch::async, [&] { return b.Get("rank1", 10000ms); });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((*srv)->kv().waiting() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  ASSERT_EQ((*srv)->kv().waiting(), 1u) << "the Get never parked in the store";
  ASSERT_TRUE(a.Set("rank1", "v1").ok());
  auto v1 = waiting.get();
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(*v1, "v1");

  auto missing = other.Get("rank0", 150ms);  // other prefix: not there
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(std::string(missing.status().message()).find("psync/g2-9/rank0"), std::string::npos) << missing.status();
  auto big = a.Set("big", std::string((1 << 20) + 1, 'x'));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(big.message()).find("psync/g1-7/big"), std::string::npos) << big;
}

}  // namespace
}  // namespace psync
