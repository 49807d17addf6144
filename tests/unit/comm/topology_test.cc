// Pure pieces of the shm/hier backends: the host layout, the backend
// choice, the shard layout, segment names and the stale-segment clean-up.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "tests/common/temp_dir.h"
#include "worker/comm/backend_choice.h"
#include "worker/comm/hash_store.h"
#include "worker/comm/shm/segment_name.h"
#include "worker/comm/shm/shard_layout.h"
#include "worker/comm/topology.h"

namespace psync::comm {
namespace {

using std::chrono::milliseconds;

bool Has(const absl::Status& st, const std::string& s) {
  return std::string(st.message()).find(s) != std::string::npos;
}

TEST(Topology, FromHostIdsNumbersHostsByTheirLowestRank) {
  auto t = Topology::FromHostIds({"b", "a", "b", "a", "c"});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->num_hosts(), 3);
  EXPECT_EQ(t->host_index(0), 0);  // "b" appears first
  EXPECT_EQ(t->host_index(1), 1);
  EXPECT_EQ(t->ranks_on_host(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(t->ranks_on_host(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(t->local_rank(2), 1);
  EXPECT_EQ(t->local_size(4), 1);
  EXPECT_FALSE(t->uniform());
  EXPECT_EQ(t->max_local_size(), 2);
  EXPECT_EQ(t->Describe(), "3 hosts (2,2,1 ranks)");
  EXPECT_FALSE(Topology::FromHostIds({"a", ""}).ok());
  EXPECT_EQ(Topology::Blocks(4, 2).Describe(), "2 hosts x 2 ranks");
  EXPECT_EQ(Topology::SingleHost(3).Describe(), "1 host, 3 ranks");
  EXPECT_TRUE(Topology::SingleHost(3).single_host());
  EXPECT_FALSE(Topology().known());
}

// Every rank publishes its hint; all build the same layout.
std::vector<absl::StatusOr<Topology>> Exchange(const std::vector<LocalHostHint>& hints) {
  auto store = std::make_shared<HashStore>();
  std::vector<absl::StatusOr<Topology>> out(hints.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t r = 0; r < hints.size(); ++r) {
    threads.emplace_back([&, r] {
      out[r] = ExchangeTopology(*store, static_cast<int>(r), static_cast<int>(hints.size()), hints[r],
                                milliseconds(5000));
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(Topology, ExchangeFromLocalRankBlocks) {
  // torchrun on 2 hosts: LOCAL_RANK / LOCAL_WORLD_SIZE = 0/3 1/3 2/3 0/1.
  auto got = Exchange({{"", 0, 3}, {"", 1, 3}, {"", 2, 3}, {"", 0, 1}});
  for (auto& t : got) {
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->Describe(), "2 hosts (3,1 ranks)");
    EXPECT_EQ(t->local_rank(3), 0);
    EXPECT_EQ(t->host_index(2), 0);
  }
}

TEST(Topology, ExchangeFromHostIdsAndUnknown) {
  auto got = Exchange({{"x", -1, -1}, {"y", -1, -1}, {"x", -1, -1}});
  ASSERT_TRUE(got[1].ok());
  EXPECT_EQ(got[1]->ranks_on_host(0), (std::vector<int>{0, 2}));
  // One rank without any hint: nobody knows the layout (auto falls back to Gloo).
  auto unknown = Exchange({{"", 0, 2}, {"", -1, -1}});
  for (auto& t : unknown) {
    ASSERT_TRUE(t.ok());
    EXPECT_FALSE(t->known());
  }
}

TEST(Topology, ExchangeRejectsOverlappingBlocks) {
  // LOCAL_WORLD_SIZE=2 on rank 1 but LOCAL_RANK missing (0): it claims ranks 1-2.
  auto got = Exchange({{"", 0, 2}, {"", 0, 2}, {"", 1, 2}});
  for (auto& t : got) {
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Has(t.status(), "disagree")) << t.status();
  }
  auto store = std::make_shared<HashStore>();
  auto bad = ExchangeTopology(*store, 1, 4, {"", 2, 2}, milliseconds(100));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Has(bad.status(), "LOCAL_RANK=2")) << bad.status();
}

TEST(BackendChoice, AutoPicksTheFastestCorrectPath) {
  auto pick = [](const Topology& t, int world, bool cuda) { return ChooseBackend("auto", t, world, cuda)->backend; };
  EXPECT_EQ(pick(Topology::SingleHost(2), 2, false), "shm");
  EXPECT_EQ(pick(Topology::Blocks(4, 2), 4, false), "hier");
  EXPECT_EQ(pick(Topology::Blocks(3, 1), 3, false), "gloo");  // one rank per host
  EXPECT_EQ(pick(Topology(), 2, false), "gloo");              // layout unknown
  EXPECT_EQ(pick(Topology::SingleHost(1), 1, false), "gloo");
  EXPECT_EQ(pick(Topology::SingleHost(2), 2, true), "nccl");
  auto c = ChooseBackend("auto", Topology::Blocks(4, 2), 4, false);
  EXPECT_NE(c->reason.find("2 hosts x 2 ranks"), std::string::npos) << c->reason;
}

TEST(BackendChoice, ExplicitRequestsAreCheckedNamingTheFlag) {
  EXPECT_EQ(ChooseBackend("shm", Topology(), 2, false)->backend, "shm");  // the user says: one host
  auto shm = ChooseBackend("shm", Topology::Blocks(4, 2), 4, false);
  ASSERT_FALSE(shm.ok());
  EXPECT_TRUE(Has(shm.status(), "--backend=shm") && Has(shm.status(), "hier")) << shm.status();
  auto hier = ChooseBackend("hier", Topology(), 4, false);
  ASSERT_FALSE(hier.ok());
  EXPECT_TRUE(Has(hier.status(), "LOCAL_WORLD_SIZE")) << hier.status();
  EXPECT_FALSE(ChooseBackend("gloo", Topology(), 2, true).ok());
  // CUDA tensors over shm (staged through pinned host memory): one host only.
  EXPECT_EQ(ChooseBackend("shm", Topology::SingleHost(2), 2, true)->backend, "shm");
  auto cuda_shm = ChooseBackend("shm", Topology::Blocks(4, 2), 4, true);
  ASSERT_FALSE(cuda_shm.ok());
  EXPECT_TRUE(Has(cuda_shm.status(), "one host")) << cuda_shm.status();
  EXPECT_FALSE(ChooseBackend("nccl", Topology(), 2, false).ok());
  auto bogus = ChooseBackend("mpi", Topology(), 2, false);
  ASSERT_FALSE(bogus.ok());
  EXPECT_TRUE(Has(bogus.status(), "auto|gloo|shm|nccl|hier")) << bogus.status();
}

// Every element lands in exactly one piece of one round, pieces fit the slot.
TEST(ShardLayout, PiecesCoverEveryElementOnce) {
  for (int parts : {1, 2, 3, 4, 7}) {
    for (size_t es : {size_t{2}, size_t{4}}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{1000}, size_t{100003}}) {
        const shm::ShardLayout lay(count, parts, es, 4096);
        ASSERT_LE(lay.piece() * es * static_cast<size_t>(parts), size_t{4096});
        std::vector<int> seen(count, 0);
        for (size_t r = 0; r < lay.rounds(); ++r) {
          for (int j = 0; j < parts; ++j) {
            const shm::Range p = lay.piece(j, r);
            ASSERT_LE(p.end, count);
            ASSERT_LE(p.size(), lay.piece());
            for (size_t i = p.begin; i < p.end; ++i) ++seen[i];
          }
        }
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(seen[i], 1) << parts << " parts, count " << count << " i " << i;
      }
    }
  }
}

TEST(SegmentName, CarriesTheCreatorAndASafeTag) {
  shm::ProcessIdentity id{1234, 987654, 4026531836ULL};
  const std::string name = shm::SegmentName(id, "job/1 g2.pg0/h1.r3");
  EXPECT_EQ(name, "/psync.4026531836.1234.987654.job_1_g2.pg0_h1.r3");
  auto back = shm::SegmentCreator(name);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->pid, 1234);
  EXPECT_EQ(back->start_time, 987654u);
  EXPECT_EQ(back->pid_ns, 4026531836ULL);
  EXPECT_FALSE(shm::SegmentCreator("sem.other").has_value());
  EXPECT_FALSE(shm::SegmentCreator("psync.x.y.z.w").has_value());
  EXPECT_LT(shm::SegmentName(id, std::string(1000, 'a')).size(), 255u);
}

TEST(SegmentName, StaleCleanupRemovesOnlyDeadCreatorsOfOurNamespace) {
  test_support::TempDir dir;
  const shm::ProcessIdentity self = shm::SelfIdentity();
  // A process that is certainly gone: a child we reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  shm::ProcessIdentity dead = self;
  dead.pid = child;
  shm::ProcessIdentity elsewhere = dead;
  elsewhere.pid_ns = self.pid_ns + 1;  // another pid namespace: cannot tell, kept
  const std::string dead_name = shm::SegmentName(dead, "stale").substr(1);
  const std::string live_name = shm::SegmentName(self, "live").substr(1);
  const std::string other_name = shm::SegmentName(elsewhere, "other").substr(1);
  for (const std::string& n : {dead_name, live_name, other_name, std::string("not-ours")}) {
    std::ofstream(dir.File(n)) << "x";
  }
  const std::vector<std::string> removed = shm::RemoveStaleSegments(dir.path());
  EXPECT_EQ(removed, std::vector<std::string>{dead_name});
  EXPECT_FALSE(std::ifstream(dir.File(dead_name)).good());
  EXPECT_TRUE(std::ifstream(dir.File(live_name)).good());
  EXPECT_TRUE(std::ifstream(dir.File(other_name)).good());
  EXPECT_TRUE(std::ifstream(dir.File("not-ours")).good());
}

// ZeRO's replica distance: the shortest ring step that leaves every rank's
// copy on another host; 1 where none does or everything is on one host.
TEST(CrossHostDistance, ShortestRingStepToAnotherHost) {
  EXPECT_EQ(CrossHostDistance(Topology()), 1);
  EXPECT_EQ(CrossHostDistance(Topology::SingleHost(4)), 1);
  EXPECT_EQ(CrossHostDistance(Topology::Blocks(4, 2)), 2);
  EXPECT_EQ(CrossHostDistance(Topology::Blocks(6, 2)), 2);
  EXPECT_EQ(CrossHostDistance(Topology::Blocks(8, 4)), 4);
  EXPECT_EQ(CrossHostDistance(*Topology::FromHostIds({"a", "b", "a", "b"})), 1);
  EXPECT_EQ(CrossHostDistance(*Topology::FromHostIds({"x", "y", "x", "x"})), 1);  // none: rank 2 -> 3 stays on x
}

}  // namespace
}  // namespace psync::comm
