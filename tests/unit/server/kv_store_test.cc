// KvStore: a Get waits without a thread and is answered by the Set, its
// deadline (ManualScheduler), Cancel or Close.
#include "server/kv_store.h"

#include <gtest/gtest.h>

#include <memory>

#include "common/manual_scheduler.h"

namespace psync::server {
namespace {

using namespace std::chrono_literals;

struct Got {
  int calls = 0;
  absl::StatusOr<std::string> v = absl::UnknownError("not answered");
};

std::shared_ptr<Got> Get(KvStore& kv, const std::string& key, std::chrono::milliseconds timeout,
                         uint64_t* ticket = nullptr) {
  auto g = std::make_shared<Got>();
  const uint64_t t = kv.Get(key, timeout, [g](absl::StatusOr<std::string> v) {
    ++g->calls;
    g->v = std::move(v);
  });
  if (ticket) *ticket = t;
  return g;
}

TEST(KvStore, GetWaitsUntilSetWithoutAThread) {
  ManualScheduler sched;
  KvStore kv(&sched);
  uint64_t ticket = 0;
  auto a = Get(kv, "k", 5000ms, &ticket);
  auto b = Get(kv, "k", 5000ms);
  EXPECT_NE(ticket, 0u);
  EXPECT_EQ(a->calls, 0);
  EXPECT_EQ(kv.waiting(), 2u);
  ASSERT_TRUE(kv.Set("k", std::string("v\0x", 3)).ok());
  EXPECT_EQ(a->calls, 1);
  EXPECT_EQ(b->calls, 1);
  ASSERT_TRUE(a->v.ok());
  EXPECT_EQ(*a->v, std::string("v\0x", 3));
  EXPECT_EQ(kv.waiting(), 0u);
  EXPECT_EQ(sched.pending(), 0u) << "the deadlines are cancelled";
  sched.Advance(10000ms);
  EXPECT_EQ(a->calls, 1);
  // Present already: answered inside Get.
  uint64_t t2 = 7;
  auto c = Get(kv, "k", 0ms, &t2);
  EXPECT_EQ(t2, 0u);
  EXPECT_EQ(c->calls, 1);
  EXPECT_TRUE(c->v.ok());
}

TEST(KvStore, ErasePrefixDropsOneGenerationsKeysOnly) {
  ManualScheduler sched;
  KvStore kv(&sched);
  for (const char* k : {"job/g1-5/a", "job/g1-5/b", "job/g1-50/a", "job/g2-7/a", "job/g1-4"}) ASSERT_TRUE(kv.Set(k, "v").ok());
  EXPECT_EQ(kv.ErasePrefix("job/g1-5/"), 2u);
  EXPECT_EQ(kv.size(), 3u);
  auto kept = Get(kv, "job/g1-50/a", 0ms);
  EXPECT_TRUE(kept->v.ok());
  auto gone = Get(kv, "job/g1-5/a", 0ms);
  EXPECT_FALSE(gone->v.ok());
  EXPECT_EQ(kv.ErasePrefix("nothing/"), 0u);
}

TEST(KvStore, GetTimesOutAtItsDeadlineNamingTheKey) {
  ManualScheduler sched;
  KvStore kv(&sched);
  auto a = Get(kv, "psync/missing", 200ms);
  sched.Advance(199ms);
  EXPECT_EQ(a->calls, 0);
  sched.Advance(1ms);
  ASSERT_EQ(a->calls, 1);
  EXPECT_EQ(a->v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(std::string(a->v.status().message()), "store key 'psync/missing' not set within 200 ms");
  ASSERT_TRUE(kv.Set("psync/missing", "late").ok());  // nobody is told twice
  EXPECT_EQ(a->calls, 1);
  auto zero = Get(kv, "nope", 0ms);
  EXPECT_EQ(zero->v.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(KvStore, CancelAndCloseAnswerWaiters) {
  ManualScheduler sched;
  KvStore kv(&sched);
  uint64_t t = 0;
  auto a = Get(kv, "a", 5000ms, &t);
  auto b = Get(kv, "b", 5000ms);
  kv.Cancel(t);
  ASSERT_EQ(a->calls, 1);
  EXPECT_EQ(a->v.status().code(), absl::StatusCode::kCancelled);
  kv.Cancel(t);
  EXPECT_EQ(a->calls, 1);
  kv.Close();
  ASSERT_EQ(b->calls, 1);
  EXPECT_EQ(b->v.status().code(), absl::StatusCode::kUnavailable);
  auto c = Get(kv, "c", 5000ms);
  EXPECT_EQ(c->v.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sched.pending(), 0u);
}

TEST(KvStore, LimitsNameKeyAndSize) {
  ManualScheduler sched;
  KvStore kv(&sched);
  auto big = kv.Set("k", std::string((1 << 20) + 1, 'x'));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(big.message()), "store value for key 'k' is 1048577 bytes; the limit is 1048576");
  EXPECT_EQ(kv.Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  auto g = Get(kv, std::string(1025, 'k'), 10ms);
  EXPECT_EQ(g->v.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace psync::server
