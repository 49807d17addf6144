// GlooGroup over real processes on 127.0.0.1 (forked ranks, FileStore).
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/common/process_event.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "worker/comm/file_store.h"
#include "worker/comm/hash_store.h"
#include "worker/comm/gloo/gloo_group.h"
#include "worker/comm/process_group_factory.h"

namespace psync::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using test_support::ExpectAllRanksOk;
using test_support::ProcessEvent;
using test_support::RunRanks;
using test_support::TempDir;

std::string Msg(const absl::Status& st) { return std::string(st.message()); }
bool Has(const absl::Status& st, const std::string& s) { return Msg(st).find(s) != std::string::npos; }
long long MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

// Creates the rank's group through the factory. The store is a FileStore in
// the test's fresh directory; the prefix keeps groups apart.
std::unique_ptr<ProcessGroup> MakeGroup(const std::string& dir, int rank, int size, milliseconds timeout,
                                        const std::string& prefix = "pg0") {
  auto store = std::make_shared<FileStore>(dir);
  GroupOptions opts;
  opts.timeout = timeout;
  opts.prefix = prefix;
  auto pg = CreateProcessGroup("gloo", store, rank, size, opts);
  if (!pg.ok()) {
    std::fprintf(stderr, "rank %d: create failed: %s\n", rank, pg.status().ToString().c_str());
    return nullptr;
  }
  return std::move(*pg);
}

int Collectives(int rank, int size, const std::string& dir) {
  auto pg = MakeGroup(dir, rank, size, milliseconds(20000));
  CHILD_CHECK(rank, pg != nullptr, "create");
  CHILD_CHECK(rank, pg->rank() == rank && pg->size() == size && pg->backend() == "gloo", "identity");

  // Large (6 MiB) allreduce with exact expected sums.
  const int64_t n = 3 * 512 * 1024;
  std::vector<float> vals(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) vals[static_cast<size_t>(i)] = static_cast<float>(rank + 1 + i % 7);
  Tensor big = Tensor::FromVector(vals, {n});
  auto w = pg->AllreduceSum(big, "big");
  absl::Status st = w->Wait(milliseconds(20000));
  CHILD_CHECK(rank, st.ok(), st.ToString());
  CHILD_CHECK(rank, w->IsCompleted(), "completed");
  std::vector<float> got = big.ToVector();
  for (int64_t i = 0; i < n; ++i) {
    const float want = static_cast<float>(size * (size + 1) / 2 + size * (i % 7));
    CHILD_CHECK(rank, got[static_cast<size_t>(i)] == want, "big[" + std::to_string(i) + "]");
  }

  // Small allreduce.
  Tensor small = Tensor::FromVector({1.0f * rank, 2.0f, -3.0f}, {3});
  st = pg->AllreduceSum(small, "small")->Wait(milliseconds(10000));
  CHILD_CHECK(rank, st.ok(), st.ToString());
  got = small.ToVector();
  CHILD_CHECK(rank, got[0] == size * (size - 1) / 2.0f && got[1] == 2.0f * size && got[2] == -3.0f * size, "small");

  // Several async allreduces in flight complete in issue order.
  const int kOps = 8;
  std::vector<Tensor> ts;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < kOps; ++k) {
    const int64_t len = (k % 2 == 0) ? 200000 + 1000 * k : 17 + k;
    ts.push_back(Tensor::Full({len}, static_cast<float>((rank + 1) * (k + 1))));
    works.push_back(pg->AllreduceSum(ts.back(), "bucket " + std::to_string(k)));
  }
  for (int k = kOps - 1; k >= 0; --k) {
    st = works[static_cast<size_t>(k)]->Wait(milliseconds(20000));
    CHILD_CHECK(rank, st.ok(), st.ToString());
    // Strict order: once op k is done every earlier op is done too.
    for (int j = 0; j < k; ++j) CHILD_CHECK(rank, works[static_cast<size_t>(j)]->IsCompleted(), "order");
  }
  for (int k = 0; k < kOps; ++k) {
    const float want = static_cast<float>((k + 1) * size * (size + 1) / 2);
    std::vector<float> v = ts[static_cast<size_t>(k)].ToVector();
    for (float x : v) CHILD_CHECK(rank, x == want, "bucket " + std::to_string(k));
  }
  CHILD_CHECK(rank, works[3]->Describe().find("bucket 3") != std::string::npos, works[3]->Describe());

  // Broadcast from the last rank.
  const int root = size - 1;
  Tensor b = Tensor::Full({1000}, rank == root ? 42.5f : -1.0f);
  st = pg->Broadcast(b, root, "weights")->Wait(milliseconds(10000));
  CHILD_CHECK(rank, st.ok(), st.ToString());
  for (float x : b.ToVector()) CHILD_CHECK(rank, x == 42.5f, "broadcast");

  // AllgatherBytes of different-length strings (rank 0 sends an empty one).
  std::string mine(static_cast<size_t>(rank * 3), static_cast<char>('a' + rank));
  auto all = pg->AllgatherBytes(mine, milliseconds(10000));
  CHILD_CHECK(rank, all.ok(), all.status().ToString());
  CHILD_CHECK(rank, static_cast<int>(all->size()) == size, "allgather size");
  for (int r = 0; r < size; ++r) {
    CHILD_CHECK(rank, (*all)[static_cast<size_t>(r)] == std::string(static_cast<size_t>(r * 3), static_cast<char>('a' + r)),
                "allgather entry " + std::to_string(r));
  }
  // Binary payload with NULs.
  auto bin = pg->AllgatherBytes(std::string("\0x\0", 3), milliseconds(10000));
  CHILD_CHECK(rank, bin.ok() && (*bin)[0] == std::string("\0x\0", 3), "binary allgather");

  st = pg->Barrier(milliseconds(10000));
  CHILD_CHECK(rank, st.ok(), st.ToString());
  // Invalid input fails the Work, not the process or the group.
  st = pg->Broadcast(b, size + 3, "bad root")->Wait(milliseconds(100));
  CHILD_CHECK(rank, st.code() == absl::StatusCode::kInvalidArgument, st.ToString());
  st = pg->Barrier(milliseconds(10000));
  CHILD_CHECK(rank, st.ok(), st.ToString());
  return 0;
}

void RunCollectives(int size) {
  TempDir dir;
  auto results = RunRanks(size, [&](int rank) { return Collectives(rank, size, dir.path()); }, std::chrono::seconds(90));
  ExpectAllRanksOk(results);
}

TEST(GlooGroup, CollectivesWorld2) { RunCollectives(2); }
TEST(GlooGroup, CollectivesWorld4) { RunCollectives(4); }

TEST(GlooGroup, CreateTimesOutNamingKeys) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  GlooOptions opts;
  opts.timeout = milliseconds(500);
  opts.prefix = "lonely";
  const auto t0 = Clock::now();
  auto pg = GlooGroup::Create(store, 0, 2, opts);  // rank 1 never comes
  EXPECT_LT(MsSince(t0), 5000);
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kDeadlineExceeded) << pg.status();
  EXPECT_TRUE(Has(pg.status(), "lonely/")) << pg.status();
  EXPECT_TRUE(Has(pg.status(), "rank 0 of 2")) << pg.status();
}

TEST(GlooGroup, BadArgumentsAndCpuOnly) {
  EXPECT_EQ(CreateProcessGroup("mpi", std::make_shared<FileStore>("/tmp"), 0, 1, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlooGroup::Create(nullptr, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  TempDir dir;
  auto pg = GlooGroup::Create(std::make_shared<FileStore>(dir.path()), 3, 2);
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GlooGroup, WorldOfOne) {
  TempDir dir;
  auto pg = MakeGroup(dir.path(), 0, 1, milliseconds(5000));
  ASSERT_NE(pg, nullptr);
  Tensor t = Tensor::Full({5}, 3.0f);
  ASSERT_TRUE(pg->AllreduceSum(t, "solo")->Wait(milliseconds(5000)).ok());
  EXPECT_EQ(t.ToVector()[4], 3.0f);
  auto all = pg->AllgatherBytes("me", milliseconds(5000));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->at(0), "me");
  EXPECT_TRUE(pg->Barrier(milliseconds(5000)).ok());
}

// Ranks as threads of one process over a HashStore (how in-process tests of
// other modules can use the group).
TEST(GlooGroup, ThreadsInOneProcess) {
  auto store = std::make_shared<HashStore>();
  const int size = 3;
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions opts;
      opts.timeout = milliseconds(10000);
      opts.prefix = "threads";
      auto pg = GlooGroup::Create(store, r, size, opts);
      if (!pg.ok()) { errors[r] = pg.status().ToString(); return; }
      Tensor t = Tensor::Full({1000}, static_cast<float>(r));
      absl::Status st = (*pg)->AllreduceSum(t, "grads")->Wait(milliseconds(10000));
      if (!st.ok()) { errors[r] = st.ToString(); return; }
      if (t.ToVector()[999] != 3.0f) errors[r] = "wrong sum";
      st = (*pg)->Barrier(milliseconds(10000));
      if (!st.ok()) errors[r] = st.ToString();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Rank 1 is SIGKILLed while rank 0 is inside an allreduce: rank 0's Wait
// fails within the timeout, naming the operation; later ops fail fast.
TEST(GlooGroup, PeerKilledDuringCollective) {
  TempDir dir;
  const milliseconds timeout(10000);
  ProcessEvent in_allreduce;
  auto results = RunRanks(
      2,
      [&](int rank) -> int {
        auto pg = MakeGroup(dir.path(), rank, 2, timeout);
        CHILD_CHECK(rank, pg != nullptr, "create");
        CHILD_CHECK(rank, pg->Barrier(timeout).ok(), "barrier");
        if (rank == 1) {
          // Dies while rank 0 is blocked in the collective, waiting on it.
          CHILD_CHECK(rank, in_allreduce.Wait(timeout), "rank 0 never started the allreduce");
          raise(SIGKILL);
        }
        Tensor t = Tensor::Full({4 << 20}, 1.0f);  // 16 MiB
        auto w = pg->AllreduceSum(t, "bucket 0");
        in_allreduce.Notify();
        const auto t0 = Clock::now();
        absl::Status st = w->Wait(timeout);
        const long long ms = MsSince(t0);
        std::fprintf(stderr, "rank 0: Wait returned after %lld ms: %s\n", ms, st.ToString().c_str());
        CHILD_CHECK(rank, !st.ok(), "must fail");
        CHILD_CHECK(rank, ms < timeout.count() + 2000, "took too long");
        CHILD_CHECK(rank, Has(st, "allreduce 'bucket 0'"), st.ToString());
        CHILD_CHECK(rank, Has(st, "rank 0 of 2"), st.ToString());
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kUnavailable && Has(st, "peer rank 1"), st.ToString());
        CHILD_CHECK(rank, ms < 5000, "peer death must be detected, not timed out");
        // Poisoned: the next op fails fast with the original reason.
        const auto t1 = Clock::now();
        absl::Status next = pg->AllreduceSum(Tensor::Full({4}, 1.0f), "bucket 1")->Wait(timeout);
        CHILD_CHECK(rank, MsSince(t1) < 500, "poisoned op must fail fast");
        CHILD_CHECK(rank, next.code() == st.code(), next.ToString());
        CHILD_CHECK(rank, Has(next, "bucket 1") && Has(next, "bucket 0"), next.ToString());
        CHILD_CHECK(rank, pg->Barrier(timeout).code() == st.code(), "barrier after failure");
        const auto t2 = Clock::now();
        pg.reset();  // destructor is bounded
        CHILD_CHECK(rank, MsSince(t2) < 5000, "destructor took too long");
        return 0;
      },
      std::chrono::seconds(60));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << "survivor code " << results[0].code;
  EXPECT_EQ(results[1].code, -SIGKILL);
}

// Rank 1 never arrives at the collective: rank 0 gets DeadlineExceeded
// within its Wait timeout (the Wait timeout is shorter than the group's).
TEST(GlooGroup, PeerNeverArrivesWaitTimeout) {
  TempDir dir;
  auto results = RunRanks(
      2,
      [&](int rank) -> int {
        auto pg = MakeGroup(dir.path(), rank, 2, milliseconds(20000));
        CHILD_CHECK(rank, pg != nullptr, "create");
        if (rank == 1) {
          std::this_thread::sleep_for(milliseconds(4000));  // never issues; exits later
          return 0;
        }
        Tensor t = Tensor::Full({1000}, 1.0f);
        auto w = pg->AllreduceSum(t, "bucket 3");
        auto w2 = pg->AllreduceSum(t, "bucket 4");  // queued behind it
        const auto t0 = Clock::now();
        absl::Status st = w->Wait(milliseconds(1500));
        const long long ms = MsSince(t0);
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kDeadlineExceeded, st.ToString());
        CHILD_CHECK(rank, ms >= 1400 && ms < 1500 + 1000, std::to_string(ms));
        CHILD_CHECK(rank, Has(st, "allreduce 'bucket 3' (3.9 KiB) on rank 0 of 2 timed out after 1.5s"), st.ToString());
        absl::Status st2 = w2->Wait(milliseconds(100));
        CHILD_CHECK(rank, st2.code() == absl::StatusCode::kDeadlineExceeded && Has(st2, "bucket 4"), st2.ToString());
        const auto t2 = Clock::now();
        pg.reset();
        CHILD_CHECK(rank, MsSince(t2) < 5000, "destructor took too long");
        return 0;
      },
      std::chrono::seconds(60));
  ExpectAllRanksOk(results);
}

// Same, but the group's own (Gloo context) timeout fires first.
TEST(GlooGroup, PeerNeverArrivesGroupTimeout) {
  TempDir dir;
  auto results = RunRanks(
      2,
      [&](int rank) -> int {
        const milliseconds timeout(1500);
        auto pg = MakeGroup(dir.path(), rank, 2, timeout);
        CHILD_CHECK(rank, pg != nullptr, "create");
        if (rank == 1) {
          std::this_thread::sleep_for(milliseconds(4000));
          return 0;
        }
        Tensor t = Tensor::Full({1000}, 1.0f);
        const auto t0 = Clock::now();
        absl::Status st = pg->AllreduceSum(t, "bucket 5")->Wait(milliseconds(30000));
        const long long ms = MsSince(t0);
        std::fprintf(stderr, "rank 0: Wait returned after %lld ms: %s\n", ms, st.ToString().c_str());
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kDeadlineExceeded, st.ToString());
        CHILD_CHECK(rank, ms < timeout.count() + 2000, std::to_string(ms));
        CHILD_CHECK(rank, Has(st, "allreduce 'bucket 5'"), st.ToString());
        return 0;
      },
      std::chrono::seconds(60));
  ExpectAllRanksOk(results);
}

// Abort from another thread fails pending work promptly, with the reason.
TEST(GlooGroup, AbortFromAnotherThread) {
  TempDir dir;
  auto results = RunRanks(
      2,
      [&](int rank) -> int {
        auto pg = MakeGroup(dir.path(), rank, 2, milliseconds(20000));
        CHILD_CHECK(rank, pg != nullptr, "create");
        CHILD_CHECK(rank, pg->Barrier(milliseconds(10000)).ok(), "barrier");
        // Rank 0 tells rank 1 through the store once its Abort returned.
        FileStore events(dir.path());
        if (rank == 1) {
          // Never issues until rank 0 aborted; its connections were closed by
          // that abort, so an op here fails at once (the group timeout, 20 s,
          // is what a peer that merely vanished would cost).
          CHILD_CHECK(rank, events.Get("test/aborted", milliseconds(30000)).ok(), "rank 0 never aborted");
          const auto t0 = Clock::now();
          absl::Status st = pg->AllreduceSum(Tensor::Full({8}, 1.0f), "after peer abort")->Wait(milliseconds(20000));
          const long long ms = MsSince(t0);
          std::fprintf(stderr, "rank 1: op after peer's abort: %lld ms: %s\n", ms, st.ToString().c_str());
          CHILD_CHECK(rank, st.code() == absl::StatusCode::kUnavailable, st.ToString());
          CHILD_CHECK(rank, Has(st, "allreduce 'after peer abort'") && Has(st, "peer rank 0"), st.ToString());
          CHILD_CHECK(rank, ms < 3000, absl::StrCat(ms, " ms: not the fast failure of a closed connection"));
          return 0;
        }
        Tensor a = Tensor::Full({100000}, 1.0f), b = Tensor::Full({10}, 1.0f);
        auto w1 = pg->AllreduceSum(a, "bucket 0");
        auto w2 = pg->AllreduceSum(b, "bucket 1");
        std::thread aborter([&] {
          std::this_thread::sleep_for(milliseconds(300));
          pg->Abort(absl::AbortedError("coordinator said stop"));
        });
        const auto t0 = Clock::now();
        absl::Status s1 = w1->Wait(milliseconds(20000));
        absl::Status s2 = w2->Wait(milliseconds(20000));
        const long long ms = MsSince(t0);
        aborter.join();
        CHILD_CHECK(rank, events.Set("test/aborted", "1").ok(), "store");
        CHILD_CHECK(rank, ms < 2000, std::to_string(ms));
        CHILD_CHECK(rank, s1.code() == absl::StatusCode::kAborted && Has(s1, "coordinator said stop") &&
                              Has(s1, "bucket 0"), s1.ToString());
        CHILD_CHECK(rank, s2.code() == absl::StatusCode::kAborted && Has(s2, "bucket 1"), s2.ToString());
        absl::Status later = pg->Barrier(milliseconds(10000));
        CHILD_CHECK(rank, later.code() == absl::StatusCode::kAborted && Has(later, "coordinator said stop"),
                    later.ToString());
        auto gathered = pg->AllgatherBytes("x", milliseconds(10000));
        CHILD_CHECK(rank, gathered.status().code() == absl::StatusCode::kAborted, gathered.status().ToString());
        const auto t2 = Clock::now();
        pg.reset();
        CHILD_CHECK(rank, MsSince(t2) < 5000, "destructor took too long");
        return 0;
      },
      std::chrono::seconds(60));
  ExpectAllRanksOk(results);
}

}  // namespace
}  // namespace psync::comm
