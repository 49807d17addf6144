// Reduce-scatter and all-gather of flat buffers (ProcessGroup::
// ReduceScatterSum / ReduceScatterAverage / Allgather) on every CPU
// backend, with real processes: gloo over 127.0.0.1, shm (staged and in a
// collective buffer, reduced in place), hier over made-up hosts (2 x 2: the
// sharded path; 3 + 1 interleaved: the leader path). Shards follow
// comm/flat_shard.h, the uneven tail and empty shards included. A peer
// killed mid-collective is named on every backend, and nobody hangs. The
// ring shift (ProcessGroup::Shift) on the same backends.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstring>
#include <thread>

#include "tests/common/process_event.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/comm/collective_check.h"
#include "worker/comm/flat_shard.h"

namespace psync::comm {
namespace {

using Clock = std::chrono::steady_clock;
using test_support::ChildResult;
using test_support::ExpectAllRanksOk;
using test_support::ProcessEvent;
using test_support::RunRanks;
using test_support::TempDir;
using namespace testing;  // NOLINT

long long MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

struct FlatSetup {
  std::string name;                // test parameter name
  std::string backend;             // gloo, shm, hier
  std::vector<std::string> hosts;  // hier: host id per rank; else empty (one host)
  int world = 2;
  bool in_buffer = false;          // tensors from NewCollectiveBuffer (shm: in place)
};

std::string FlatSetupName(const ::testing::TestParamInfo<FlatSetup>& info) { return info.param.name; }

GroupOptions OptionsFor(const FlatSetup& s, milliseconds timeout = milliseconds(20000)) {
  GroupOptions o;
  o.timeout = timeout;
  o.shm_slot_bytes = 1024;  // 256 floats per slot: the staged paths take many steps
  o.shm_small_bytes = 256;
  o.job_tag = "flat";
  if (!s.hosts.empty()) o.topology = *Topology::FromHostIds(s.hosts);
  return o;
}

std::vector<size_t> Sizes() {
  return {0, 1, 2, 3, 5, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 255, 1000, 4093, (1u << 16) + 7};
}

Tensor MakeTensor(ProcessGroup& pg, bool in_buffer, size_t n, DType dtype, int64_t lead) {
  if (!in_buffer) return Tensor::Zeros({static_cast<int64_t>(n)}, dtype);
  absl::StatusOr<Tensor> b = pg.NewCollectiveBuffer({static_cast<int64_t>(n) + lead}, dtype, Device::CPU());
  if (!b.ok()) throw std::runtime_error(b.status().ToString());
  return b->View(lead, {static_cast<int64_t>(n)});
}

class FlatCollectives : public ::testing::TestWithParam<FlatSetup> {};

// Every size, issued back to back: the own shard holds the exact sum (small
// integers), and with the average the sum times 1/world with the same bits
// as scaling the sum.
TEST_P(FlatCollectives, ReduceScatterSumAndAverageEverySize) {
  const FlatSetup s = GetParam();
  TempDir dir;
  const GroupOptions o = OptionsFor(s);
  ExpectAllRanksOk(RunRanks(
      s.world,
      [&](int rank) -> int {
        auto pg = MakeGroup(s.backend, dir.path(), rank, s.world, o, "rs");
        CHILD_CHECK(rank, pg != nullptr, "create");
        const std::vector<size_t> sizes = Sizes();
        for (bool average : {false, true}) {
          std::vector<Tensor> ts;
          std::vector<std::shared_ptr<Work>> works;
          for (size_t k = 0; k < sizes.size(); ++k) {
            Tensor t = MakeTensor(*pg, s.in_buffer, sizes[k], kFloat32, k % 2 ? 19 : 0);
            const std::vector<float> v = IntValues(rank, sizes[k], static_cast<uint32_t>(k));
            if (!v.empty()) std::memcpy(t.data<float>(), v.data(), v.size() * 4);
            ts.push_back(t);
            const std::string name = "size " + std::to_string(sizes[k]);
            works.push_back(average ? pg->ReduceScatterAverage(t, name) : pg->ReduceScatterSum(t, name));
          }
          for (size_t k = 0; k < sizes.size(); ++k) {
            absl::Status st = works[k]->Wait(milliseconds(60000));
            CHILD_CHECK(rank, st.ok(), st.ToString());
            const ShardRange own = ShardOf(sizes[k], s.world, rank, 4);
            const std::vector<float> got = ts[k].ToVector();
            std::vector<float> sum(sizes[k], 0.0f);
            for (int r = 0; r < s.world; ++r) {
              const std::vector<float> v = IntValues(r, sizes[k], static_cast<uint32_t>(k));
              for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
            }
            for (size_t i = own.begin; i < own.end; ++i) {
              const float exact = sum[i];
              const float want = average ? exact * (1.0f / static_cast<float>(s.world)) : exact;
              if (std::memcmp(&got[i], &want, 4) != 0) {
                std::fprintf(stderr, "rank %d: size %zu (%s) element %zu: got %g want %g\n", rank, sizes[k],
                             average ? "average" : "sum", i, got[i], want);
                return 1;
              }
            }
          }
        }
        return 0;
      },
      std::chrono::seconds(120)));
}

// Every rank fills only its own shard; afterwards every rank holds every shard.
TEST_P(FlatCollectives, AllgatherEverySizeAndType) {
  const FlatSetup s = GetParam();
  TempDir dir;
  const GroupOptions o = OptionsFor(s);
  ExpectAllRanksOk(RunRanks(
      s.world,
      [&](int rank) -> int {
        auto pg = MakeGroup(s.backend, dir.path(), rank, s.world, o, "ag");
        CHILD_CHECK(rank, pg != nullptr, "create");
        const std::vector<size_t> sizes = Sizes();
        for (DType dtype : {kFloat32, kInt64}) {
          const size_t es = ElementSize(dtype);
          std::vector<Tensor> ts;
          std::vector<std::shared_ptr<Work>> works;
          for (size_t k = 0; k < sizes.size(); ++k) {
            Tensor t = MakeTensor(*pg, s.in_buffer, sizes[k], dtype, k % 2 ? 8 : 0);
            const ShardRange own = ShardOf(sizes[k], s.world, rank, es);
            for (size_t i = 0; i < sizes[k]; ++i) {
              // Not ours: garbage that must be overwritten.
              const int64_t v = own.begin <= i && i < own.end ? static_cast<int64_t>(i * 3 + k) : -7;
              if (dtype == kFloat32) {
                t.data<float>()[i] = static_cast<float>(v);
              } else {
                t.data<int64_t>()[i] = v;
              }
            }
            ts.push_back(t);
            works.push_back(pg->Allgather(t, "params " + std::to_string(sizes[k])));
          }
          for (size_t k = 0; k < sizes.size(); ++k) {
            absl::Status st = works[k]->Wait(milliseconds(60000));
            CHILD_CHECK(rank, st.ok(), st.ToString());
            for (size_t i = 0; i < sizes[k]; ++i) {
              const int64_t want = static_cast<int64_t>(i * 3 + k);
              const int64_t got = dtype == kFloat32 ? static_cast<int64_t>(ts[k].data<float>()[i]) : ts[k].data<int64_t>()[i];
              if (got != want) {
                std::fprintf(stderr, "rank %d: size %zu element %zu: got %lld want %lld\n", rank, sizes[k], i,
                             static_cast<long long>(got), static_cast<long long>(want));
                return 1;
              }
            }
          }
        }
        return 0;
      },
      std::chrono::seconds(120)));
}

// Reduce-scatter then all-gather of arbitrary floats leaves every rank with
// the same bits; on shm they are the allreduce's bits (the same rank-order
// sum), which --zero relies on to equal the unsharded run.
TEST_P(FlatCollectives, ReduceScatterThenAllgatherIsAnAllreduce) {
  const FlatSetup s = GetParam();
  TempDir dir;
  const GroupOptions o = OptionsFor(s);
  ExpectAllRanksOk(RunRanks(
      s.world,
      [&](int rank) -> int {
        auto pg = MakeGroup(s.backend, dir.path(), rank, s.world, o, "rsag");
        CHILD_CHECK(rank, pg != nullptr, "create");
        const size_t n = 5003;
        Tensor a = MakeTensor(*pg, s.in_buffer, n, kFloat32, 0);
        Tensor b = MakeTensor(*pg, s.in_buffer, n, kFloat32, 0);
        const std::vector<float> v = RandomValues(rank, n, 11);
        std::memcpy(a.data<float>(), v.data(), n * 4);
        std::memcpy(b.data<float>(), v.data(), n * 4);
        absl::Status st = pg->ReduceScatterAverage(a, "grads")->Wait(milliseconds(20000));
        CHILD_CHECK(rank, st.ok(), st.ToString());
        st = pg->Allgather(a, "grads")->Wait(milliseconds(20000));
        CHILD_CHECK(rank, st.ok(), st.ToString());
        st = pg->AllreduceAverage(b, "grads")->Wait(milliseconds(20000));
        CHILD_CHECK(rank, st.ok(), st.ToString());
        const std::vector<float> got = a.ToVector(), all = b.ToVector();
        const std::string bytes(reinterpret_cast<const char*>(got.data()), n * 4);
        auto everyone = pg->AllgatherBytes(bytes, milliseconds(20000));
        CHILD_CHECK(rank, everyone.ok(), everyone.status().ToString());
        for (const std::string& other : *everyone) CHILD_CHECK(rank, other == bytes, "ranks hold different bits");
        for (size_t i = 0; i < n; ++i) {
          if (s.backend == "shm") {
            CHILD_CHECK(rank, std::memcmp(&got[i], &all[i], 4) == 0,
                        "element " + std::to_string(i) + ": not the allreduce's bits");
          } else {
            CHILD_CHECK(rank, std::abs(got[i] - all[i]) <= 1e-6f, "element " + std::to_string(i));
          }
        }
        return 0;
      },
      std::chrono::seconds(60)));
}

// ProcessGroup::Shift at every distance and several sizes (empty included),
// issued back to back: each rank receives exactly what the rank `distance`
// behind it sent, and its own send is unchanged. Bad arguments fail the
// Work, naming the shift, and leave the group usable.
TEST_P(FlatCollectives, ShiftEveryDistanceAndSize) {
  const FlatSetup s = GetParam();
  TempDir dir;
  const GroupOptions o = OptionsFor(s);
  ExpectAllRanksOk(RunRanks(
      s.world,
      [&](int rank) -> int {
        auto pg = MakeGroup(s.backend, dir.path(), rank, s.world, o, "shift");
        CHILD_CHECK(rank, pg != nullptr, "create");
        auto value = [](int from, int distance, size_t k, size_t i) {
          return static_cast<int64_t>(from) * 1000000007 + distance * 100003 + static_cast<int64_t>(k * 10007 + i);
        };
        const std::vector<size_t> sizes = {0, 1, 17, 4093, (1u << 16) + 7};
        for (int distance = 1; distance < s.world; ++distance) {
          std::vector<Tensor> sends, recvs;
          std::vector<std::shared_ptr<Work>> works;
          for (size_t k = 0; k < sizes.size(); ++k) {
            Tensor send = Tensor::Zeros({static_cast<int64_t>(sizes[k])}, kInt64);
            for (size_t i = 0; i < sizes[k]; ++i) send.data<int64_t>()[i] = value(rank, distance, k, i);
            sends.push_back(send);
            recvs.push_back(Tensor::Full({static_cast<int64_t>(sizes[k])}, -1.0f).To(kInt64));
            works.push_back(pg->Shift(sends.back(), recvs.back(), distance, "replica " + std::to_string(k)));
          }
          const int from = (rank - distance + s.world) % s.world;
          for (size_t k = 0; k < sizes.size(); ++k) {
            absl::Status st = works[k]->Wait(milliseconds(60000));
            CHILD_CHECK(rank, st.ok(), st.ToString());
            for (size_t i = 0; i < sizes[k]; ++i) {
              CHILD_CHECK(rank, recvs[k].data<int64_t>()[i] == value(from, distance, k, i),
                          "distance " + std::to_string(distance) + " size " + std::to_string(sizes[k]) + " element " +
                              std::to_string(i));
              CHILD_CHECK(rank, sends[k].data<int64_t>()[i] == value(rank, distance, k, i), "send changed");
            }
          }
        }
        absl::Status st = pg->Shift(Tensor::Zeros({4}), Tensor::Zeros({4}), 0, "none")->Wait(milliseconds(1000));
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kInvalidArgument && Has(st, "shift 'none'"), st.ToString());
        st = pg->Shift(Tensor::Zeros({4}), Tensor::Zeros({5}), 1, "uneven")->Wait(milliseconds(1000));
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kInvalidArgument && Has(st, "shift 'uneven'"), st.ToString());
        st = pg->Barrier(milliseconds(20000));
        CHILD_CHECK(rank, st.ok(), st.ToString());
        return 0;
      },
      std::chrono::seconds(120)));
}

TEST_P(FlatCollectives, BadInputFailsTheWorkNotTheGroup) {
  const FlatSetup s = GetParam();
  TempDir dir;
  const GroupOptions o = OptionsFor(s);
  ExpectAllRanksOk(RunRanks(
      s.world,
      [&](int rank) -> int {
        auto pg = MakeGroup(s.backend, dir.path(), rank, s.world, o, "bad");
        CHILD_CHECK(rank, pg != nullptr, "create");
        absl::Status st = pg->ReduceScatterSum(Tensor::Zeros({8}, kInt64), "ints")->Wait(milliseconds(1000));
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kInvalidArgument && Has(st, "reduce-scatter 'ints'"),
                    st.ToString());
        st = pg->Allgather(Tensor(), "none")->Wait(milliseconds(1000));
        CHILD_CHECK(rank, st.code() == absl::StatusCode::kInvalidArgument && Has(st, "all-gather 'none'"),
                    st.ToString());
        st = pg->Barrier(milliseconds(20000));
        CHILD_CHECK(rank, st.ok(), st.ToString());
        return 0;
      },
      std::chrono::seconds(60)));
}

// The last rank is SIGKILLed while the others loop over reduce-scatters and
// all-gathers: every survivor's Wait fails with the op named, a peer's
// death named, within seconds (gloo: the PeerWatch wakes a receive whose
// message was cut off, which Gloo itself would leave to the timeout); none
// hangs.
TEST_P(FlatCollectives, PeerKilledMidCollectiveIsNamed) {
  const FlatSetup s = GetParam();
  TempDir dir;
  const milliseconds timeout(10000);
  const GroupOptions o = OptionsFor(s, timeout);
  const int victim = s.world - 1;
  ProcessEvent steps_done;  // rank 0 completed a few collectives with the victim
  std::vector<ChildResult> results = RunRanks(
      s.world,
      [&](int rank) -> int {
        auto pg = MakeGroup(s.backend, dir.path(), rank, s.world, o, "kill");
        CHILD_CHECK(rank, pg != nullptr, "create");
        CHILD_CHECK(rank, pg->Barrier(timeout).ok(), "barrier");
        Tensor t = MakeTensor(*pg, s.in_buffer, 1 << 20, kFloat32, 0);  // 4 MiB: many steps
        if (rank == victim) {
          std::thread killer([&] {
            if (!steps_done.Wait(timeout)) std::fprintf(stderr, "victim: rank 0 never completed a step\n");
            raise(SIGKILL);
          });
          for (int k = 0;; ++k) {
            (void)(k % 2 ? pg->Allgather(t, "params 0") : pg->ReduceScatterSum(t, "bucket 0"))->Wait(timeout);
          }
        }
        absl::Status st;
        long long ms = 0;  // how long the failing collective took
        for (int k = 0; k < 100000 && st.ok(); ++k) {
          const auto t0 = Clock::now();
          st = (k % 2 ? pg->Allgather(t, "params 0") : pg->ReduceScatterSum(t, "bucket 0"))->Wait(timeout);
          ms = MsSince(t0);
          if (k == 3 && rank == 0) steps_done.Notify();
        }
        std::fprintf(stderr, "rank %d: failed after %lld ms: %s\n", rank, ms, st.ToString().c_str());
        CHILD_CHECK(rank, !st.ok(), "must fail");
        CHILD_CHECK(rank, Has(st, "reduce-scatter 'bucket 0'") || Has(st, "all-gather 'params 0'"), st.ToString());
        CHILD_CHECK(rank, ms < timeout.count() + 3000, "bounded");
        if (s.backend == "gloo") {
          CHILD_CHECK(rank, st.code() == absl::StatusCode::kUnavailable, st.ToString());
          CHILD_CHECK(rank, s.world != 2 || Has(st, "peer rank 1"), st.ToString());
          CHILD_CHECK(rank, ms < 5000, "a death must be detected, not timed out");
        }
        if (s.backend == "shm") {
          CHILD_CHECK(rank, st.code() == absl::StatusCode::kUnavailable || st.code() == absl::StatusCode::kAborted,
                      st.ToString());
          CHILD_CHECK(rank, Has(st, "died") || Has(st, "stopped"), st.ToString());
          CHILD_CHECK(rank, ms < 3000, "a death must be detected, not timed out");
        }
        // Poisoned: the next op fails fast with the original reason.
        const auto t1 = Clock::now();
        absl::Status next = pg->ReduceScatterSum(Tensor::Zeros({64}), "bucket 1")->Wait(timeout);
        CHILD_CHECK(rank, !next.ok() && MsSince(t1) < 1000 && Has(next, "bucket 1"), next.ToString());
        return 0;
      },
      std::chrono::seconds(90));
  ASSERT_EQ(results.size(), static_cast<size_t>(s.world));
  for (int r = 0; r < s.world; ++r) {
    if (r == victim) {
      EXPECT_EQ(results[static_cast<size_t>(r)].code, -SIGKILL);
    } else {
      EXPECT_TRUE(results[static_cast<size_t>(r)].ok()) << "rank " << r << " exit " << results[static_cast<size_t>(r)].code;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, FlatCollectives,
    ::testing::Values(FlatSetup{"gloo2", "gloo", {}, 2, false}, FlatSetup{"gloo3", "gloo", {}, 3, false},
                      FlatSetup{"gloo4", "gloo", {}, 4, false}, FlatSetup{"shm3", "shm", {}, 3, false},
                      FlatSetup{"shm2_buffer", "shm", {}, 2, true}, FlatSetup{"shm4_buffer", "shm", {}, 4, true},
                      FlatSetup{"hier2x2", "hier", {"a", "a", "b", "b"}, 4, false},
                      FlatSetup{"hier_interleaved2x2", "hier", {"a", "b", "a", "b"}, 4, false},
                      FlatSetup{"hier_uneven", "hier", {"x", "y", "x", "x"}, 4, false}),
    FlatSetupName);

}  // namespace
}  // namespace psync::comm
