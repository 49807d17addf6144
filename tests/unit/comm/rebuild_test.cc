// A process group rebuilt inside the surviving processes after a peer dies
// (the groundwork of live recovery, issue 32): the survivors' collective
// fails, they abort and destroy the group, and form a new one for the new
// membership under a fresh store prefix, in the same process, again and
// again. Each rebuild must leave nothing behind: threads, file descriptors
// (sockets), this process's /dev/shm segments and memory stay flat.
// Real forked ranks on 127.0.0.1 (gloo), shared memory (shm) and both (hier).
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/common/process_event.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/comm/collective_check.h"
#include "worker/comm/shm/segment_name.h"

namespace psync::comm {
namespace {

using test_support::ProcessEvent;
using test_support::RunRanks;
using test_support::TempDir;
using namespace testing;  // NOLINT

// What a process holds that a group could leak.
struct Resources {
  int threads = 0;
  int fds = 0;
  int shm_segments = 0;  // in /dev/shm, created by this process
  int64_t rss_kib = 0;
  std::string ToString() const {
    return absl::StrCat("threads ", threads, ", fds ", fds, ", own /dev/shm segments ", shm_segments, ", RSS ",
                        rss_kib, " KiB");
  }
};

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

Resources Measure() {
  Resources r;
  r.threads = static_cast<int>(DirEntries("/proc/self/task").size());
  r.fds = static_cast<int>(DirEntries("/proc/self/fd").size()) - 1;  // opendir's own
  for (const std::string& n : DirEntries("/dev/shm")) {
    std::optional<shm::ProcessIdentity> creator = shm::SegmentCreator(n);
    if (creator && creator->pid == ::getpid()) ++r.shm_segments;
  }
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) r.rss_kib = std::stoll(line.substr(6));
  }
  return r;
}

// Nothing more than `baseline` holds (a leak adds; it never takes away).
bool NoMoreHandles(const Resources& now, const Resources& baseline) {
  return now.threads <= baseline.threads && now.fds <= baseline.fds && now.shm_segments <= baseline.shm_segments;
}

// Measure(), once nothing is left over from a group just destroyed, or after
// a bound. Why wait: a joined thread can stay listed in /proc/self/task for
// a moment after pthread_join returned (the kernel wakes the joiner before
// it removes the task), longer beside a CPU hog; a leaked one stays.
Resources MeasureSettled(const Resources& baseline) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  Resources now = Measure();
  while (!NoMoreHandles(now, baseline) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    now = Measure();
  }
  return now;
}

struct Case {
  std::string backend;
  std::vector<std::string> hosts;  // host id per rank of the first membership
};

GroupOptions OptionsFor(const Case& c, const std::vector<std::string>& hosts, milliseconds timeout) {
  GroupOptions o;
  o.timeout = timeout;
  o.job_tag = absl::StrCat("rebuild-", ::getppid());
  o.shm_slot_bytes = 4096;
  o.shm_small_bytes = 512;
  if (c.backend != "gloo") o.topology = *Topology::FromHostIds(hosts);
  return o;
}

// One survivor's life: the first group fails when the last rank dies inside
// an allreduce; then `kRebuilds` groups of the survivors, each checked with
// an exact allreduce and destroyed, with the resources measured after each.
constexpr int kRebuilds = 5;

int Survivor(const Case& c, int rank, const std::string& dir, std::vector<std::unique_ptr<ProcessEvent>>& in_allreduce) {
  const int size = static_cast<int>(c.hosts.size());
  {
    auto pg = testing::MakeGroup(c.backend, dir, rank, size, OptionsFor(c, c.hosts, milliseconds(5000)), "e0");
    CHILD_CHECK(rank, pg != nullptr, "create epoch 0");
    CHILD_CHECK(rank, pg->Barrier(milliseconds(20000)).ok(), "barrier epoch 0");
    Tensor t = Tensor::Full({1 << 20}, 1.0f);
    auto w = pg->AllreduceSum(t, "bucket 0");
    in_allreduce[static_cast<size_t>(rank)]->Notify();
    absl::Status st = w->Wait(milliseconds(20000));
    std::fprintf(stderr, "rank %d (%s): epoch 0's allreduce: %s\n", rank, c.backend.c_str(), st.ToString().c_str());
    CHILD_CHECK(rank, !st.ok(), "the allreduce must fail: the last rank died inside it");
    // What a survivor does on a loss: abort what is in flight, drop the group.
    pg->Abort(absl::AbortedError("rank lost: new membership"));
  }
  std::vector<std::string> survivors(c.hosts.begin(), c.hosts.end() - 1);
  const int new_size = size - 1;
  Resources first;
  for (int epoch = 1; epoch <= kRebuilds; ++epoch) {
    {
      auto pg = testing::MakeGroup(c.backend, dir, rank, new_size, OptionsFor(c, survivors, milliseconds(20000)),
                                   absl::StrCat("e", epoch));
      CHILD_CHECK(rank, pg != nullptr, absl::StrCat("create epoch ", epoch));
      CHILD_CHECK(rank, pg->rank() == rank && pg->size() == new_size, "identity");
      for (size_t n : {size_t{3}, size_t{5000}}) {  // the one-step and the sharded allreduce
        Tensor t = Tensor::FromVector(testing::IntValues(rank, n, static_cast<uint32_t>(epoch)), {static_cast<int64_t>(n)});
        absl::Status st = pg->AllreduceSum(t, "bucket 0")->Wait(milliseconds(20000));
        CHILD_CHECK(rank, st.ok(), st.ToString());
        std::vector<float> want(n, 0.0f);
        for (int r = 0; r < new_size; ++r) {
          std::vector<float> v = testing::IntValues(r, n, static_cast<uint32_t>(epoch));
          for (size_t i = 0; i < n; ++i) want[i] += v[i];
        }
        CHILD_CHECK(rank, t.ToVector() == want, absl::StrCat("epoch ", epoch, ": allreduce of ", n));
      }
      CHILD_CHECK(rank, pg->Barrier(milliseconds(20000)).ok(), "barrier");
    }
    const Resources now = epoch == 1 ? Measure() : MeasureSettled(first);
    std::fprintf(stderr, "rank %d (%s): after epoch %d: %s\n", rank, c.backend.c_str(), epoch, now.ToString().c_str());
    if (epoch == 1) first = now;
    CHILD_CHECK(rank, NoMoreHandles(now, first),
                absl::StrCat("epoch ", epoch, " leaked: ", now.ToString(), " vs after epoch 1: ", first.ToString()));
    CHILD_CHECK(rank, now.shm_segments == 0, absl::StrCat("segments left: ", now.ToString()));
    CHILD_CHECK(rank, now.rss_kib <= first.rss_kib + 8 * 1024,
                absl::StrCat("memory grew: ", now.ToString(), " vs ", first.ToString()));
  }
  return 0;
}

void RunRebuild(const Case& c) {
  TempDir dir;
  const int size = static_cast<int>(c.hosts.size());
  std::vector<std::unique_ptr<ProcessEvent>> in_allreduce;
  for (int r = 0; r < size; ++r) in_allreduce.push_back(std::make_unique<ProcessEvent>());
  auto results = RunRanks(
      size,
      [&](int rank) -> int {
        if (rank < size - 1) return Survivor(c, rank, dir.path(), in_allreduce);
        // The rank that dies: inside the first allreduce, once every survivor is in it.
        auto pg = testing::MakeGroup(c.backend, dir.path(), rank, size, OptionsFor(c, c.hosts, milliseconds(5000)), "e0");
        CHILD_CHECK(rank, pg != nullptr, "create");
        CHILD_CHECK(rank, pg->Barrier(milliseconds(20000)).ok(), "barrier");
        for (int r = 0; r < size - 1; ++r) {
          CHILD_CHECK(rank, in_allreduce[static_cast<size_t>(r)]->Wait(milliseconds(20000)), "survivors never started");
        }
        raise(SIGKILL);
        return 1;
      },
      std::chrono::seconds(120));
  ASSERT_EQ(results.size(), static_cast<size_t>(size));
  for (int r = 0; r < size - 1; ++r) EXPECT_TRUE(results[static_cast<size_t>(r)].ok()) << "survivor rank " << r;
  EXPECT_EQ(results.back().code, -SIGKILL);
}

TEST(GroupRebuild, GlooSurvivorsFormNewGroupsInProcessWithoutLeaks) { RunRebuild({"gloo", {"h", "h", "h"}}); }
TEST(GroupRebuild, ShmSurvivorsFormNewGroupsInProcessWithoutLeaks) { RunRebuild({"shm", {"h", "h", "h"}}); }
// Hosts a, a, b, b -> survivors a, a, b: the within-host and the cross-host part both rebuilt.
TEST(GroupRebuild, HierSurvivorsFormNewGroupsInProcessWithoutLeaks) { RunRebuild({"hier", {"a", "a", "b", "b"}}); }

}  // namespace
}  // namespace psync::comm
