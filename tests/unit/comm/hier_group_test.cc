// HierGroup over real processes: "hosts" are made up by the topology (host
// ids filled in directly), so shm carries the within-host part and Gloo over
// 127.0.0.1 the cross-host part, all on this machine.
#include <gtest/gtest.h>

#include <signal.h>

#include <thread>

#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/comm/collective_check.h"

namespace psync::comm {
namespace {

using Clock = std::chrono::steady_clock;
using test_support::ExpectAllRanksOk;
using test_support::RunRanks;
using test_support::TempDir;
using namespace testing;  // NOLINT

long long MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

GroupOptions HierOptions(const std::vector<std::string>& hosts, milliseconds timeout = milliseconds(20000)) {
  GroupOptions o;
  o.timeout = timeout;
  o.topology = *Topology::FromHostIds(hosts);
  o.shm_slot_bytes = 1024;
  o.shm_small_bytes = 256;
  return o;
}

void RunSameAsGloo(const std::vector<std::string>& hosts) {
  TempDir dir;
  const int size = static_cast<int>(hosts.size());
  const GroupOptions o = HierOptions(hosts);
  ExpectAllRanksOk(RunRanks(
      size,
      [&](int rank) -> int {
        auto hier = MakeGroup("hier", dir.path(), rank, size, o, "hier");
        auto gloo = MakeGroup("gloo", dir.path(), rank, size, o, "gloo");
        CHILD_CHECK(rank, hier && gloo, "create");
        CHILD_CHECK(rank, hier->backend() == "hier" && hier->rank() == rank && hier->size() == size, "identity");
        return SameAsGloo(rank, size, *hier, *gloo, SizeClasses(o.topology.max_local_size(), o.shm_slot_bytes));
      },
      std::chrono::seconds(180)));
}

// 2 ranks: one per host (local groups of one, all Gloo).
TEST(HierGroup, SameAsGlooTwoHostsOneRankEach) { RunSameAsGloo({"a", "b"}); }
// 3 ranks: hosts of 2 and 1 rank: the leader algorithm.
TEST(HierGroup, SameAsGlooUnevenHostsWorld3) { RunSameAsGloo({"a", "a", "b"}); }
// 4 ranks: 2 hosts x 2: the sharded algorithm.
TEST(HierGroup, SameAsGlooTwoHostsTwoRanksWorld4) { RunSameAsGloo({"a", "a", "b", "b"}); }
// 4 ranks: hosts of 3 and 1, interleaved host ids.
TEST(HierGroup, SameAsGlooUnevenInterleavedWorld4) { RunSameAsGloo({"x", "y", "x", "x"}); }

// Arbitrary floats: every rank ends with the same bits, run after run.
TEST(HierGroup, EveryRankGetsTheSameBits) {
  TempDir dir;
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  const GroupOptions o = HierOptions(hosts);
  ExpectAllRanksOk(RunRanks(
      4,
      [&](int rank) -> int {
        auto pg = MakeGroup("hier", dir.path(), rank, 4, o, "bits");
        CHILD_CHECK(rank, pg != nullptr, "create");
        std::string first;
        for (int run = 0; run < 2; ++run) {
          const size_t n = 5003;
          Tensor t = Tensor::FromVector(RandomValues(rank, n, 42), {static_cast<int64_t>(n)});
          absl::Status st = pg->AllreduceSum(t, "random")->Wait(milliseconds(20000));
          CHILD_CHECK(rank, st.ok(), st.ToString());
          const std::vector<float> v = t.ToVector();
          const std::string bytes(reinterpret_cast<const char*>(v.data()), v.size() * 4);
          auto all = pg->AllgatherBytes(bytes, milliseconds(20000));
          CHILD_CHECK(rank, all.ok(), all.status().ToString());
          for (const std::string& other : *all) CHILD_CHECK(rank, other == bytes, "ranks differ");
          if (run == 0) first = bytes;
          CHILD_CHECK(rank, bytes == first, "runs differ");
        }
        return 0;
      },
      std::chrono::seconds(60)));
}

TEST(HierGroup, BroadcastFromEveryRootAllgatherBarrier) {
  TempDir dir;
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  const GroupOptions o = HierOptions(hosts);
  ExpectAllRanksOk(RunRanks(
      4,
      [&](int rank) -> int {
        auto pg = MakeGroup("hier", dir.path(), rank, 4, o, "misc");
        CHILD_CHECK(rank, pg != nullptr, "create");
        for (int root = 0; root < 4; ++root) {
          const size_t n = 300 + static_cast<size_t>(root);
          Tensor b = Tensor::FromVector(rank == root ? IntValues(root, n) : std::vector<float>(n, -1.0f),
                                        {static_cast<int64_t>(n)});
          absl::Status st = pg->Broadcast(b, root, "weights")->Wait(milliseconds(20000));
          CHILD_CHECK(rank, st.ok(), st.ToString());
          CHILD_CHECK(rank, b.ToVector() == IntValues(root, n), "broadcast from " + std::to_string(root));
        }
        const std::string mine(static_cast<size_t>(rank * 700), static_cast<char>('a' + rank));
        auto all = pg->AllgatherBytes(mine, milliseconds(20000));
        CHILD_CHECK(rank, all.ok(), all.status().ToString());
        for (int r = 0; r < 4; ++r) {
          CHILD_CHECK(rank, (*all)[static_cast<size_t>(r)] == std::string(static_cast<size_t>(r * 700),
                                                                           static_cast<char>('a' + r)),
                      "allgather entry " + std::to_string(r));
        }
        CHILD_CHECK(rank, pg->Barrier(milliseconds(20000)).ok(), "barrier");
        return 0;
      },
      std::chrono::seconds(60)));
}

TEST(HierGroup, NeedsAKnownTopology) {
  TempDir dir;
  GroupOptions o;
  auto pg = CreateProcessGroup("hier", std::make_shared<FileStore>(dir.path()), 0, 2, o);
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(pg.status(), "LOCAL_WORLD_SIZE")) << pg.status();
  o.topology = Topology::Blocks(2, 1);
  auto shm = CreateProcessGroup("shm", std::make_shared<FileStore>(dir.path()), 0, 2, o);
  ASSERT_FALSE(shm.ok());
  EXPECT_TRUE(Has(shm.status(), "2 hosts")) << shm.status();
}

// Rank 3 (host b, local rank 1) is SIGKILLed mid-collective: its host peer
// (rank 2) sees it through shared memory at once; the others through Gloo.
// Every survivor fails within a few seconds, none hangs.
TEST(HierGroup, RankKilledMidCollectiveFailsEverySurvivor) {
  TempDir dir;
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  const milliseconds timeout(10000);
  const GroupOptions o = HierOptions(hosts, timeout);
  auto results = RunRanks(
      4,
      [&](int rank) -> int {
        auto pg = MakeGroup("hier", dir.path(), rank, 4, o, "kill");
        CHILD_CHECK(rank, pg != nullptr, "create");
        CHILD_CHECK(rank, pg->Barrier(timeout).ok(), "barrier");
        Tensor t = Tensor::Full({1 << 20}, 1.0f);
        if (rank == 3) {
          std::thread killer([] {
            std::this_thread::sleep_for(milliseconds(300));
            raise(SIGKILL);
          });
          for (;;) (void)pg->AllreduceSum(t, "bucket 0")->Wait(timeout);
        }
        absl::Status st;
        const auto t0 = Clock::now();
        for (int k = 0; k < 10000 && st.ok(); ++k) st = pg->AllreduceSum(t, "bucket 0")->Wait(timeout);
        const long long ms = MsSince(t0);
        std::fprintf(stderr, "rank %d: failed after %lld ms: %s\n", rank, ms, st.ToString().c_str());
        CHILD_CHECK(rank, !st.ok(), "must fail");
        CHILD_CHECK(rank, Has(st, "allreduce 'bucket 0'"), st.ToString());
        if (rank == 2) CHILD_CHECK(rank, Has(st, "local peer rank 3") && Has(st, "died"), st.ToString());
        CHILD_CHECK(rank, ms < timeout.count() + 3000, "bounded");
        return 0;
      },
      std::chrono::seconds(90));
  ASSERT_EQ(results.size(), 4u);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(results[static_cast<size_t>(r)].ok()) << "rank " << r;
  EXPECT_EQ(results[3].code, -SIGKILL);
}

}  // namespace
}  // namespace psync::comm
