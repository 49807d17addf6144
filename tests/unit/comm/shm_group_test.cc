// ShmGroup over real processes (forked ranks, FileStore, /dev/shm), checked
// against Gloo over 127.0.0.1 in the same processes.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/common/process_event.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/comm/collective_check.h"
#include "worker/comm/file_store.h"
#include "worker/comm/shm/segment_name.h"
#include "worker/comm/shm/shm_context.h"
#include "worker/comm/shm/shm_group.h"
#include "psync/tensor/device.h"
#include "psync/tensor/ops/pointwise.h"

namespace psync::comm {
namespace {

using Clock = std::chrono::steady_clock;
using test_support::ExpectAllRanksOk;
using test_support::ProcessEvent;
using test_support::RunRanks;
using test_support::TempDir;
using namespace testing;  // NOLINT

long long MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

// /dev/shm entries whose name contains `needle`.
std::vector<std::string> ShmEntries(const std::string& needle) {
  std::vector<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).find(needle) != std::string::npos) out.emplace_back(e->d_name);
    }
    closedir(d);
  }
  return out;
}

// A job tag no other test (or run) uses, so /dev/shm checks see only ours.
std::string UniqueTag(const std::string& what) {
  return what + "-" + std::to_string(getpid()) + "-" +
         std::to_string(Clock::now().time_since_epoch().count() % 1000000007);
}

GroupOptions SmallWorkspace(milliseconds timeout = milliseconds(20000)) {
  GroupOptions o;
  o.timeout = timeout;
  o.shm_slot_bytes = 1024;  // 256 floats per slot: every size class crosses many steps
  o.shm_small_bytes = 256;
  return o;
}

// ---------------------------------------------------------------- correctness

void RunSameAsGloo(int size) {
  TempDir dir;
  const GroupOptions small = SmallWorkspace();
  GroupOptions big;
  big.timeout = milliseconds(20000);
  ExpectAllRanksOk(RunRanks(
      size,
      [&](int rank) -> int {
        auto shm_small = MakeGroup("shm", dir.path(), rank, size, small, "shm-small");
        auto shm_default = MakeGroup("shm", dir.path(), rank, size, big, "shm-default");
        auto gloo = MakeGroup("gloo", dir.path(), rank, size, big, "gloo");
        CHILD_CHECK(rank, shm_small && shm_default && gloo, "create");
        CHILD_CHECK(rank, shm_small->backend() == "shm" && shm_small->rank() == rank && shm_small->size() == size,
                    "identity");
        if (SameAsGloo(rank, size, *shm_small, *gloo, SizeClasses(size, small.shm_slot_bytes)) != 0) return 1;
        // The default workspace (1 MiB slots): symmetric, one step, several steps.
        return SameAsGloo(rank, size, *shm_default, *gloo, {0, 1, 4095, 4097, (1u << 20) + 3, 3u << 20});
      },
      std::chrono::seconds(120)));
}

TEST(ShmGroup, SameAsGlooEverySizeClassWorld2) { RunSameAsGloo(2); }
TEST(ShmGroup, SameAsGlooEverySizeClassWorld3) { RunSameAsGloo(3); }
TEST(ShmGroup, SameAsGlooEverySizeClassWorld4) { RunSameAsGloo(4); }

// Tensors in collective buffers (shared memory, reduced in place; views at
// an offset too), every size class, 2..4 ranks; nothing left in /dev/shm
// once the buffers are gone.
TEST(ShmGroup, CollectiveBuffersSameAsGloo) {
  for (int size : {2, 3, 4}) {
    TempDir dir;
    GroupOptions o = SmallWorkspace();
    o.job_tag = UniqueTag("buffers");
    ExpectAllRanksOk(RunRanks(
        size,
        [&](int rank) -> int {
          auto shm = MakeGroup("shm", dir.path(), rank, size, o, "shm");
          auto gloo = MakeGroup("gloo", dir.path(), rank, size, o, "gloo");
          CHILD_CHECK(rank, shm && gloo, "create");
          std::vector<size_t> sizes = SizeClasses(size, o.shm_slot_bytes);
          sizes.push_back((1u << 20) + 5);
          if (SameAsGloo(rank, size, *shm, *gloo, sizes, /*in_buffer=*/true) != 0) return 1;
          CHILD_CHECK(rank, ShmEntries(o.job_tag).empty(), "buffers must be unlinked once mapped");
          return 0;
        },
        std::chrono::seconds(120)));
    EXPECT_TRUE(ShmEntries(o.job_tag).empty()) << size << " ranks";
  }
}

// Arbitrary floats: every rank gets exactly the rank-order sum
// ((x0 + x1) + x2) + x3, on every run, whatever the algorithm or chunking.
TEST(ShmGroup, DeterministicRankOrderSum) {
  TempDir dir;
  const int size = 3;
  ExpectAllRanksOk(RunRanks(
      size,
      [&](int rank) -> int {
        auto pg = MakeGroup("shm", dir.path(), rank, size, SmallWorkspace(), "det");
        CHILD_CHECK(rank, pg != nullptr, "create");
        for (size_t n : {size_t{7}, size_t{60}, size_t{1000}, size_t{12345}}) {
          for (int run = 0; run < 2; ++run) {
            Tensor t = Tensor::FromVector(RandomValues(rank, n, n), {static_cast<int64_t>(n)});
            absl::Status st = pg->AllreduceSum(t, "random")->Wait(milliseconds(20000));
            CHILD_CHECK(rank, st.ok(), st.ToString());
            std::vector<float> want = RandomValues(0, n, n);
            for (int r = 1; r < size; ++r) {
              const std::vector<float> v = RandomValues(r, n, n);
              for (size_t i = 0; i < n; ++i) want[i] += v[i];
            }
            const std::vector<float> got = t.ToVector();
            CHILD_CHECK(rank, std::memcmp(got.data(), want.data(), n * 4) == 0, "not the rank-order sum, n=" +
                                                                                    std::to_string(n));
          }
        }
        return 0;
      },
      std::chrono::seconds(60)));
}

// bfloat16 / float16 (the compression hooks' wire types): accumulated in
// float in rank order, rounded once; float64 exact in rank order too.
TEST(ShmGroup, SixteenBitSumsAccumulateInFloat) {
  TempDir dir;
  const int size = 3;
  ExpectAllRanksOk(RunRanks(
      size,
      [&](int rank) -> int {
        auto pg = MakeGroup("shm", dir.path(), rank, size, SmallWorkspace(), "half");
        CHILD_CHECK(rank, pg != nullptr, "create");
        const size_t n = 3001;
        auto half_of = [&](int r, auto tag) {
          using H = decltype(tag);
          std::vector<H> v;
          for (float f : RandomValues(r, n, 9)) v.push_back(H(f));
          return v;
        };
        auto check = [&](auto tag, DType dtype) -> int {
          using H = decltype(tag);
          Tensor t = Tensor::FromVector(half_of(rank, tag), {static_cast<int64_t>(n)});
          CHILD_CHECK(rank, t.dtype() == dtype, "dtype");
          absl::Status st = pg->AllreduceSum(t, DTypeName(dtype))->Wait(milliseconds(20000));
          CHILD_CHECK(rank, st.ok(), st.ToString());
          std::vector<float> acc(n, 0.0f);
          for (int r = 0; r < size; ++r) {
            const std::vector<H> v = half_of(r, tag);
            for (size_t i = 0; i < n; ++i) acc[i] = r == 0 ? static_cast<float>(v[i]) : acc[i] + static_cast<float>(v[i]);
          }
          const std::vector<H> got = t.ToVector<H>();
          for (size_t i = 0; i < n; ++i) {
            CHILD_CHECK(rank, got[i].bits == H(acc[i]).bits, std::string(DTypeName(dtype)) + " element " + std::to_string(i));
          }
          return 0;
        };
        if (check(BFloat16(), kBFloat16) != 0) return 1;
        if (check(Float16(), kFloat16) != 0) return 1;
        std::vector<double> d(n);
        for (size_t i = 0; i < n; ++i) d[i] = 0.1 * static_cast<double>(i) + rank;
        Tensor t = Tensor::FromVector(d, {static_cast<int64_t>(n)});
        CHILD_CHECK(rank, pg->AllreduceSum(t, "f64")->Wait(milliseconds(20000)).ok(), "f64");
        const std::vector<double> got = t.ToVector<double>();
        for (size_t i = 0; i < n; ++i) {
          double want = 0.1 * static_cast<double>(i);
          for (int r = 1; r < size; ++r) want += 0.1 * static_cast<double>(i) + r;
          CHILD_CHECK(rank, got[i] == want, "f64 element " + std::to_string(i));
        }
        // An int64 tensor has no sum here: a clear error, not garbage.
        absl::Status bad = pg->AllreduceSum(Tensor::Zeros({4}, kInt64), "ids")->Wait(milliseconds(1000));
        CHILD_CHECK(rank, bad.code() == absl::StatusCode::kInvalidArgument && Has(bad, "int64"), bad.ToString());
        return 0;
      },
      std::chrono::seconds(60)));
}

// AllreduceAverage (the reducer's default hook) fuses the 1/size into the
// reduction for float32/float64: the same bits as AllreduceSum followed by
// ScaleInPlace (the default ProcessGroup path), 3 ranks (1/3 is inexact),
// every algorithm (one step, sharded, in place in a collective buffer).
TEST(ShmGroup, AverageSameBitsAsSumThenScale) {
  TempDir dir;
  const int size = 3;
  ExpectAllRanksOk(RunRanks(
      size,
      [&](int rank) -> int {
        auto pg = MakeGroup("shm", dir.path(), rank, size, SmallWorkspace(), "avg");
        CHILD_CHECK(rank, pg != nullptr, "create");
        for (size_t n : {size_t{1}, size_t{17}, size_t{60}, size_t{1000}, size_t{12345}}) {
          for (int where = 0; where < 2; ++where) {
            const std::vector<float> v = RandomValues(rank, n, n + 5);
            Tensor avg = Tensor::FromVector(v, {static_cast<int64_t>(n)});
            if (where == 1) {
              auto b = pg->NewCollectiveBuffer({static_cast<int64_t>(n) + 3}, kFloat32, Device::CPU());
              CHILD_CHECK(rank, b.ok(), b.status().ToString());
              avg = b->View(3, {static_cast<int64_t>(n)});
              std::memcpy(avg.data<float>(), v.data(), n * sizeof(float));
            }
            Tensor sum = Tensor::FromVector(v, {static_cast<int64_t>(n)});
            absl::Status st = pg->AllreduceAverage(avg, "avg")->Wait(milliseconds(20000));
            CHILD_CHECK(rank, st.ok(), st.ToString());
            st = pg->AllreduceSum(sum, "sum")->Wait(milliseconds(20000));
            CHILD_CHECK(rank, st.ok(), st.ToString());
            ops::ScaleInPlace(sum, 1.0f / static_cast<float>(size));
            const std::vector<float> got = avg.ToVector(), want = sum.ToVector();
            CHILD_CHECK(rank, std::memcmp(got.data(), want.data(), n * 4) == 0,
                        "float32 average differs, n=" + std::to_string(n) + (where ? " (buffer)" : ""));
          }
        }
        std::vector<double> d(999);
        for (size_t i = 0; i < d.size(); ++i) d[i] = 0.1 * static_cast<double>(i) + 0.7 * rank;
        Tensor avg = Tensor::FromVector(d, {999}), sum = Tensor::FromVector(d, {999});
        CHILD_CHECK(rank, pg->AllreduceAverage(avg, "f64 avg")->Wait(milliseconds(20000)).ok(), "f64 avg");
        CHILD_CHECK(rank, pg->AllreduceSum(sum, "f64 sum")->Wait(milliseconds(20000)).ok(), "f64 sum");
        ops::ScaleInPlace(sum, 1.0f / static_cast<float>(size));
        CHILD_CHECK(rank, avg.ToVector<double>() == sum.ToVector<double>(), "float64 average differs");
        // 16-bit: no fused shortcut; like every group, the scaling (a float
        // op) refuses the storage type with a clear error, after a collective
        // every rank ran alike (the group stays usable).
        Tensor h = Tensor::Zeros({777}, kBFloat16);
        absl::Status hst = pg->AllreduceAverage(h, "bf16 avg")->Wait(milliseconds(20000));
        CHILD_CHECK(rank, !hst.ok() && Has(hst, "bf16 avg") && Has(hst, "bfloat16"), hst.ToString());
        CHILD_CHECK(rank, pg->Barrier(milliseconds(10000)).ok(), "usable after");
        return 0;
      },
      std::chrono::seconds(60)));
}

TEST(ShmGroup, BroadcastAllgatherBarrier) {
  TempDir dir;
  const int size = 3;
  ExpectAllRanksOk(RunRanks(
      size,
      [&](int rank) -> int {
        auto pg = MakeGroup("shm", dir.path(), rank, size, SmallWorkspace(), "misc");
        CHILD_CHECK(rank, pg != nullptr, "create");
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{1000}}) {
          const int root = static_cast<int>(n % size);
          Tensor b = Tensor::FromVector(rank == root ? IntValues(7, static_cast<size_t>(n))
                                                     : std::vector<float>(static_cast<size_t>(n), -99.0f),
                                        {n});
          absl::Status st = pg->Broadcast(b, root, "weights")->Wait(milliseconds(10000));
          CHILD_CHECK(rank, st.ok(), st.ToString());
          CHILD_CHECK(rank, b.ToVector() == IntValues(7, static_cast<size_t>(n)), "broadcast n=" + std::to_string(n));
        }
        // Different lengths, rank 0 empty, one longer than a slot; binary bytes.
        std::string mine(static_cast<size_t>(rank == 2 ? 3000 : rank * 5), static_cast<char>('a' + rank));
        if (rank == 1) mine[2] = '\0';
        auto all = pg->AllgatherBytes(mine, milliseconds(10000));
        CHILD_CHECK(rank, all.ok(), all.status().ToString());
        CHILD_CHECK(rank, all->size() == static_cast<size_t>(size), "allgather size");
        for (int r = 0; r < size; ++r) {
          std::string want(static_cast<size_t>(r == 2 ? 3000 : r * 5), static_cast<char>('a' + r));
          if (r == 1) want[2] = '\0';
          CHILD_CHECK(rank, (*all)[static_cast<size_t>(r)] == want, "allgather entry " + std::to_string(r));
        }
        CHILD_CHECK(rank, pg->Barrier(milliseconds(10000)).ok(), "barrier");
        absl::Status st = pg->Broadcast(Tensor::Full({4}, 1.0f), size + 1, "bad root")->Wait(milliseconds(100));
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kInvalidArgument, st.ToString());
        CHILD_CHECK(rank, pg->Barrier(milliseconds(10000)).ok(), "barrier after a bad argument");
        return 0;
      },
      std::chrono::seconds(60)));
}

// Whether a CUDA device is usable, asked in a child: a parent that
// initialised CUDA could not use it in the ranks it forks.
bool CudaUsableInChildren() {
  const pid_t pid = fork();
  if (pid == 0) _exit(CudaDeviceCount() > 0 ? 0 : 1);
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// CUDA tensors (--backend=shm with --device=cuda): two ranks on cuda:0, the
// one-GPU case NCCL refuses, staged through pinned host memory; the same
// bits as the CPU tensors' collectives (the reduction runs on the host).
TEST(ShmGroup, CudaTensorsStagedThroughPinnedHostMemory) {
  if (!CudaUsableInChildren()) GTEST_SKIP() << "no usable CUDA device";
  TempDir dir;
  const int size = 2;
  GroupOptions o;
  o.timeout = milliseconds(20000);
  ExpectAllRanksOk(RunRanks(
      size,
      [&](int rank) -> int {
        auto shm = MakeGroup("shm", dir.path(), rank, size, o, "shm-cuda");
        CHILD_CHECK(rank, shm != nullptr, "create");
        const Device gpu = Device::CUDA(0);
        for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{3} << 20}) {  // one step .. several slots
          std::vector<float> mine(static_cast<size_t>(n)), want(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) {
            mine[static_cast<size_t>(i)] = static_cast<float>((i * 7 + rank * 3) % 101) / 8.0f;
            want[static_cast<size_t>(i)] = static_cast<float>((i * 7) % 101 + (i * 7 + 3) % 101) / 8.0f;
          }
          Tensor cpu = Tensor::FromVector(mine, {n});
          Tensor dev = cpu.To(gpu);
          absl::Status st = shm->AllreduceSum(dev, "cuda bucket")->Wait(milliseconds(20000));
          CHILD_CHECK(rank, st.ok(), st.ToString());
          CHILD_CHECK(rank, dev.ToVector() == want, "CUDA allreduce sum differs");
          st = shm->AllreduceAverage(dev, "cuda average")->Wait(milliseconds(20000));
          CHILD_CHECK(rank, st.ok(), st.ToString());
          Tensor cpu_sum = Tensor::FromVector(want, {n});
          st = shm->AllreduceAverage(cpu_sum, "cpu average")->Wait(milliseconds(20000));
          CHILD_CHECK(rank, st.ok() && dev.ToVector() == cpu_sum.ToVector(), "CUDA average != CPU average");
        }
        Tensor b = Tensor::Full({17}, static_cast<double>(rank + 1), kBFloat16, gpu);
        absl::Status st = shm->Broadcast(b, 1, "cuda broadcast")->Wait(milliseconds(20000));
        CHILD_CHECK(rank, st.ok(), st.ToString());
        CHILD_CHECK(rank, b.To(kFloat32).ToVector() == std::vector<float>(17, 2.0f), "CUDA broadcast");
        return 0;
      },
      std::chrono::seconds(120)));
}

TEST(ShmGroup, WorldOfOneNeedsNoSharedMemory) {
  TempDir dir;
  const std::string tag = UniqueTag("solo");
  GroupOptions o;
  o.job_tag = tag;
  auto pg = MakeGroup("shm", dir.path(), 0, 1, o, "solo");
  ASSERT_NE(pg, nullptr);
  Tensor t = Tensor::Full({5}, 3.0f);
  ASSERT_TRUE(pg->AllreduceSum(t, "solo")->Wait(milliseconds(5000)).ok());
  EXPECT_EQ(t.ToVector()[4], 3.0f);
  auto all = pg->AllgatherBytes("me", milliseconds(5000));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->at(0), "me");
  EXPECT_TRUE(pg->Barrier(milliseconds(5000)).ok());
  EXPECT_TRUE(ShmEntries(tag).empty());
}

// Two jobs on one host at once, same group prefix, same job tag, same ranks:
// the segment names still differ (creator identity), nothing collides.
TEST(ShmGroup, ConcurrentJobsDoNotCollide) {
  TempDir a, b;
  ExpectAllRanksOk(RunRanks(
      4,
      [&](int child) -> int {
        const int rank = child % 2;
        const std::string& dir = child < 2 ? a.path() : b.path();
        GroupOptions o = SmallWorkspace();
        o.job_tag = "same-job";
        auto pg = MakeGroup("shm", dir, rank, 2, o, "pg0");
        CHILD_CHECK(child, pg != nullptr, "create");
        for (int k = 0; k < 20; ++k) {
          const float mine = static_cast<float>(child * 100 + k);
          Tensor t = Tensor::Full({777}, mine);
          absl::Status st = pg->AllreduceSum(t, "bucket")->Wait(milliseconds(20000));
          CHILD_CHECK(child, st.ok(), st.ToString());
          const float want = child < 2 ? static_cast<float>(0 + 100 + 2 * k) : static_cast<float>(200 + 300 + 2 * k);
          CHILD_CHECK(child, t.ToVector()[776] == want, "cross-job mix-up");
        }
        return 0;
      },
      std::chrono::seconds(60)));
}

// Every rank must issue the same collective: a size mismatch is an error
// naming the peer and what it issued, on both sides (no hang, no garbage).
TEST(ShmGroup, MismatchedCollectivesFailNamingThePeer) {
  TempDir dir;
  ExpectAllRanksOk(RunRanks(
      2,
      [&](int rank) -> int {
        auto pg = MakeGroup("shm", dir.path(), rank, 2, SmallWorkspace(), "mismatch");
        CHILD_CHECK(rank, pg != nullptr, "create");
        Tensor t = Tensor::Full({rank == 0 ? 10 : 12}, 1.0f);
        absl::Status st = pg->AllreduceSum(t, "bucket 2")->Wait(milliseconds(10000));
        // The first rank to notice fails with FailedPrecondition and aborts;
        // the other may see that abort first, carrying the same explanation.
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kFailedPrecondition ||
                              st.code() == absl::StatusCode::kAborted, st.ToString());
        CHILD_CHECK(rank, Has(st, "different collective") && Has(st, "of 12 elements") && Has(st, "of 10 elements"),
                    st.ToString());
        return 0;
      },
      std::chrono::seconds(60)));
}

// ---------------------------------------------------------------- failures

// Rank 1 is SIGKILLed while rank 0 waits for it inside an allreduce: rank
// 0's Wait fails within milliseconds (pid watch), naming the peer; the group
// is poisoned; nothing is left in /dev/shm.
void PeerKilled(bool heartbeat, bool in_buffer = false) {
  TempDir dir;
  const std::string tag = UniqueTag("killed");
  const milliseconds timeout(10000);
  ProcessEvent steps_done;  // rank 0 completed a few collectives with rank 1
  auto results = RunRanks(
      2,
      [&](int rank) -> int {
        auto store = std::make_shared<FileStore>(dir.path());
        shm::ShmOptions so;
        so.timeout = timeout;
        so.prefix = "kill";
        so.job_tag = tag;
        so.force_heartbeat = heartbeat;
        auto pg_or = ShmGroup::Create(store, rank, 2, so);
        CHILD_CHECK(rank, pg_or.ok(), pg_or.status().ToString());
        std::unique_ptr<ProcessGroup> pg = std::move(*pg_or);
        CHILD_CHECK(rank, pg->Barrier(timeout).ok(), "barrier");
        CHILD_CHECK(rank, ShmEntries(tag).empty(), "segments must be unlinked once everyone mapped them");
        Tensor t = Tensor::Full({4 << 20}, 1.0f);  // 16 MiB: many steps
        if (in_buffer) {
          auto b = pg->NewCollectiveBuffer({4 << 20}, kFloat32, Device::CPU());
          CHILD_CHECK(rank, b.ok(), b.status().ToString());
          t = *b;
        }
        if (rank == 1) {
          // Takes part in a few steps, then dies mid-collective: it loops
          // without pause, so the kill lands inside one.
          std::thread killer([&] {
            if (!steps_done.Wait(timeout)) std::fprintf(stderr, "rank 1: rank 0 never completed a step\n");
            raise(SIGKILL);
          });
          for (;;) (void)pg->AllreduceSum(t, "bucket 0")->Wait(timeout);
        }
        absl::Status st;
        const auto t0 = Clock::now();
        // Loops until the peer's death hits a collective: three complete
        // together, then rank 1 is killed while the loop goes on.
        for (int k = 0; k < 1000 && st.ok(); ++k) {
          st = pg->AllreduceSum(t, "bucket 0")->Wait(timeout);
          if (k == 2) steps_done.Notify();
        }
        const long long ms = MsSince(t0);
        std::fprintf(stderr, "rank 0: failed after %lld ms: %s\n", ms, st.ToString().c_str());
        CHILD_CHECK(rank, !st.ok(), "must fail");
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kUnavailable, st.ToString());
        CHILD_CHECK(rank, Has(st, "allreduce 'bucket 0'") && Has(st, "rank 0 of 2"), st.ToString());
        CHILD_CHECK(rank, Has(st, "local peer rank 1") && Has(st, "died"), st.ToString());
        CHILD_CHECK(rank, ms < (heartbeat ? 6000 : 2000), "death must be detected, not timed out");
        const auto t1 = Clock::now();
        absl::Status next = pg->AllreduceSum(Tensor::Full({4}, 1.0f), "bucket 1")->Wait(timeout);
        CHILD_CHECK(rank, MsSince(t1) < 500 && next.code() == st.code(), next.ToString());
        CHILD_CHECK(rank, Has(next, "bucket 1") && Has(next, "bucket 0"), next.ToString());
        const auto t2 = Clock::now();
        pg.reset();
        CHILD_CHECK(rank, MsSince(t2) < 3000, "destructor took too long");
        return 0;
      },
      std::chrono::seconds(60));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << "survivor code " << results[0].code;
  EXPECT_EQ(results[1].code, -SIGKILL);
  EXPECT_TRUE(ShmEntries(tag).empty());
}

TEST(ShmGroup, PeerKilledMidCollectiveIsNamedWithinMilliseconds) { PeerKilled(false); }
TEST(ShmGroup, PeerKilledMidCollectiveHeartbeatWatch) { PeerKilled(true); }
TEST(ShmGroup, PeerKilledMidInPlaceCollective) { PeerKilled(false, /*in_buffer=*/true); }

// Rank 1 never issues the collective: rank 0 fails after the group timeout,
// naming the peer (alive, but not there).
TEST(ShmGroup, PeerNeverArrivesTimesOut) {
  TempDir dir;
  ExpectAllRanksOk(RunRanks(
      2,
      [&](int rank) -> int {
        GroupOptions o = SmallWorkspace(milliseconds(1500));
        auto pg = MakeGroup("shm", dir.path(), rank, 2, o, "late");
        CHILD_CHECK(rank, pg != nullptr, "create");
        if (rank == 1) {
          std::this_thread::sleep_for(milliseconds(4000));
          return 0;
        }
        const auto t0 = Clock::now();
        absl::Status st = pg->AllreduceSum(Tensor::Full({1000}, 1.0f), "bucket 5")->Wait(milliseconds(30000));
        const long long ms = MsSince(t0);
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kDeadlineExceeded, st.ToString());
        CHILD_CHECK(rank, ms >= 1400 && ms < 3500, std::to_string(ms));
        CHILD_CHECK(rank, Has(st, "allreduce 'bucket 5'") && Has(st, "local peer rank 1") && Has(st, "alive"),
                    st.ToString());
        // A shorter Wait than the group timeout: DeadlineExceeded from Wait.
        absl::Status again = pg->AllreduceSum(Tensor::Full({4}, 1.0f), "bucket 6")->Wait(milliseconds(100));
        CHILD_CHECK(rank, again.code() == absl::StatusCode::kDeadlineExceeded, again.ToString());
        return 0;
      },
      std::chrono::seconds(60)));
}

// A Wait may run its collective inline (no hand-off to the communication
// thread); it still ends at the Wait's own deadline, not the group's.
TEST(ShmGroup, WaitBoundsACollectiveItRunsInline) {
  TempDir dir;
  ExpectAllRanksOk(RunRanks(
      2,
      [&](int rank) -> int {
        auto pg = MakeGroup("shm", dir.path(), rank, 2, SmallWorkspace(milliseconds(20000)), "inline");
        CHILD_CHECK(rank, pg != nullptr, "create");
        CHILD_CHECK(rank, pg->Barrier(milliseconds(10000)).ok(), "barrier");
        if (rank == 1) {
          std::this_thread::sleep_for(milliseconds(3000));
          return 0;
        }
        const auto t0 = Clock::now();
        absl::Status st = pg->AllreduceSum(Tensor::Full({10}, 1.0f), "bucket 0")->Wait(milliseconds(400));
        const long long ms = MsSince(t0);
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kDeadlineExceeded && Has(st, "bucket 0"), st.ToString());
        CHILD_CHECK(rank, ms >= 350 && ms < 1500, std::to_string(ms));
        return 0;
      },
      std::chrono::seconds(60)));
}

// Abort from another thread: the blocked collective returns at once with the
// reason; the peer's next collective fails fast naming who stopped, and
// quotes the reason's head and its cause at the end (a nested reason longer
// than the control block holds loses its middle).
TEST(ShmGroup, AbortFromAnotherThreadReachesThePeer) {
  TempDir dir;
  const std::string reason =
      absl::StrCat("coordinator said stop: ", std::string(3000, '.'), " caused by: connection to peer rank 7 lost");
  ProcessEvent aborted;  // rank 0's blocked collective has returned aborted
  ExpectAllRanksOk(RunRanks(
      2,
      [&](int rank) -> int {
        auto pg = MakeGroup("shm", dir.path(), rank, 2, SmallWorkspace(), "abort");
        CHILD_CHECK(rank, pg != nullptr, "create");
        CHILD_CHECK(rank, pg->Barrier(milliseconds(10000)).ok(), "barrier");
        if (rank == 1) {
          CHILD_CHECK(rank, aborted.Wait(milliseconds(30000)), "rank 0 never aborted");
          const auto t0 = Clock::now();
          absl::Status st = pg->AllreduceSum(Tensor::Full({8}, 1.0f), "after peer abort")->Wait(milliseconds(20000));
          CHILD_CHECK(rank, !st.ok() && MsSince(t0) < 1000, st.ToString());
          CHILD_CHECK(rank, Has(st, "local peer rank 0") && Has(st, "coordinator said stop") &&
                                Has(st, "caused by: connection to peer rank 7 lost") && Has(st, " [...] "),
                      st.ToString());
          return 0;
        }
        auto w = pg->AllreduceSum(Tensor::Full({100000}, 1.0f), "bucket 0");
        std::thread aborter([&] {
          std::this_thread::sleep_for(milliseconds(300));
          pg->Abort(absl::AbortedError(reason));
        });
        const auto t0 = Clock::now();
        absl::Status st = w->Wait(milliseconds(20000));
        const long long ms = MsSince(t0);
        aborter.join();
        aborted.Notify();
        CHILD_CHECK(rank, ms < 1500, std::to_string(ms));
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kAborted && Has(st, "coordinator said stop") &&
                              Has(st, "bucket 0"), st.ToString());
        CHILD_CHECK(rank, pg->Barrier(milliseconds(1000)).code() == absl::StatusCode::kAborted, "poisoned");
        return 0;
      },
      std::chrono::seconds(60)));
}

// A process killed during the rendezvous leaves its segment behind; the next
// job's start removes it by name (its creator is dead).
TEST(ShmGroup, StaleSegmentOfAKilledJobIsRemovedAtNextStart) {
  TempDir dir;
  const std::string tag = UniqueTag("stale");
  auto results = RunRanks(
      2,
      [&](int child) -> int {
        if (child == 0) {
          {
            std::ofstream(dir.File("victim.pid")) << getpid();
          }
          shm::ShmOptions so;
          so.timeout = milliseconds(30000);
          so.prefix = "stale";
          so.job_tag = tag;
          // Rank 1 never comes: blocks in the rendezvous until killed.
          auto ctx = shm::ShmContext::Create(std::make_shared<FileStore>(dir.path()), {0, 1}, 0, so);
          return 3;
        }
        // The killer: waits for the victim's segment, then SIGKILLs it.
        const auto t0 = Clock::now();
        while (ShmEntries(tag).empty() && MsSince(t0) < 20000) std::this_thread::sleep_for(milliseconds(10));
        CHILD_CHECK(child, !ShmEntries(tag).empty(), "victim's segment never appeared");
        pid_t victim = 0;
        std::ifstream(dir.File("victim.pid")) >> victim;
        CHILD_CHECK(child, victim > 0, "victim pid");
        kill(victim, SIGKILL);
        return 0;
      },
      std::chrono::seconds(60));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].code, -SIGKILL);
  EXPECT_TRUE(results[1].ok());
  ASSERT_EQ(ShmEntries(tag).size(), 1u) << "the killed rendezvous should have left its segment";
  const std::vector<std::string> removed = shm::RemoveStaleSegments();
  EXPECT_TRUE(ShmEntries(tag).empty());
  bool named = false;
  for (const auto& n : removed) named = named || n.find(tag) != std::string::npos;
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace psync::comm
