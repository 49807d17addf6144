// PeerWatch (worker/comm/gloo/peer_watch.h) over real Gloo contexts of
// forked ranks on 127.0.0.1: a lost peer fails only the receives that wait
// on it, and only if its message never came.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include "tests/common/process_event.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "worker/comm/gloo/peer_watch.h"
#include "worker/comm/gloo/ring.h"

namespace psync::comm::gloo_ring {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using test_support::ProcessEvent;
using test_support::RunRanks;
using test_support::TempDir;

constexpr milliseconds kTimeout(20000);

std::shared_ptr<gloo::Context> Connect(const std::string& dir, int rank, int size) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  attr.ai_family = AF_INET;
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(kTimeout);
  gloo::rendezvous::FileStore store(dir);
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  ctx->connectFullMesh(store, device);
  return ctx;
}

bool WaitUntilLost(const PeerWatch& watch, int peer, milliseconds bound) {
  for (const auto until = Clock::now() + bound; Clock::now() < until;) {
    for (int r : watch.lost_peers()) {
      if (r == peer) return true;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  return false;
}

// Rank 1 dies while rank 3 waits in a shift with rank 2, which sends only
// once rank 3's watch has seen the loss: the shift completes with rank 2's
// data (the loss is none of its business).
// A shift that does exchange with the lost rank then fails.
TEST(PeerWatch, ALossAbortsOnlyTheOpsThatExchangeWithThatPeer) {
  TempDir dir;
  ProcessEvent seen;  // rank 3's watch found rank 1 lost
  std::vector<test_support::ChildResult> results = RunRanks(
      4,
      [&](int rank) -> int {
        std::shared_ptr<gloo::Context> ctx = Connect(dir.path(), rank, 4);
        PeerWatch watch(ctx);
        gloo::BarrierOptions barrier(ctx);
        gloo::barrier(barrier);  // every pair is up before rank 1 goes
        if (rank == 1) raise(SIGKILL);
        if (rank == 0) {
          CHILD_CHECK(rank, WaitUntilLost(watch, 1, kTimeout), "rank 0 never saw rank 1 lost");
          return 0;
        }
        const int other = 5 - rank;  // 2 <-> 3
        std::vector<int> send(1024, rank), recv(1024, -1);
        if (rank == 2) {
          CHILD_CHECK(rank, seen.Wait(kTimeout), "rank 3 never saw the loss");
        } else {
          std::thread notifier([&] {
            if (WaitUntilLost(watch, 1, kTimeout)) seen.Notify();
          });
          notifier.detach();  // ends within kTimeout; the process outlives it only by then
        }
        try {
          Shift(ctx, &watch, 0, kTimeout, send.data(), recv.data(), send.size() * sizeof(int), other, other);
        } catch (const std::exception& e) {
          CHILD_CHECK(rank, false, std::string("the shift with a healthy peer failed: ") + e.what());
        }
        CHILD_CHECK(rank, recv.front() == other && recv.back() == other, "data");
        CHILD_CHECK(rank, WaitUntilLost(watch, 1, kTimeout), "rank 1 never found lost");
        if (rank == 3) {
          std::string what;
          try {
            Shift(ctx, &watch, 2, kTimeout, send.data(), recv.data(), send.size() * sizeof(int), 1, 1);
          } catch (const std::exception& e) {
            what = e.what();
          }
          CHILD_CHECK(rank, !what.empty(), "a shift with the lost rank must fail");
        }
        return 0;
      },
      std::chrono::seconds(60));
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[1].code, -SIGKILL);
  for (int r : {0, 2, 3}) EXPECT_TRUE(results[static_cast<size_t>(r)].ok()) << "rank " << r;
}

// Rank 1 sends to rank 0 and dies. Rank 0 looks only once its watch has
// seen the loss (so its wait was aborted first): the message read before
// the loss still completes the receive. Rank 2's receive from rank 1,
// which never came, fails at once instead of at the timeout.
TEST(PeerWatch, AMessageThatArrivedBeforeTheLossStillCompletesItsReceive) {
  TempDir dir;
  std::vector<test_support::ChildResult> results = RunRanks(
      3,
      [&](int rank) -> int {
        std::shared_ptr<gloo::Context> ctx = Connect(dir.path(), rank, 3);
        PeerWatch watch(ctx);
        std::vector<int> data(4096, rank == 1 ? 7 : -1);
        auto buffer = ctx->createUnboundBuffer(data.data(), data.size() * sizeof(int));
        const uint64_t slot = gloo::Slot::build(kShiftSlotPrefix, 0);
        if (rank != 1) buffer->recv(1, slot);
        gloo::BarrierOptions barrier(ctx);
        gloo::barrier(barrier);  // both receives are posted
        if (rank == 1) {
          buffer->send(0, slot);
          PeerWatch::Scope watched(&watch, -1, {}, 0, {buffer.get()});
          watched.WaitSend(buffer.get(), kTimeout, "send");
          raise(SIGKILL);
        }
        PeerWatch::Scope watched(&watch, 1, {buffer.get()}, -1, {});
        CHILD_CHECK(rank, WaitUntilLost(watch, 1, kTimeout), "the loss was never seen");
        const auto t0 = Clock::now();
        std::string what;
        try {
          watched.WaitRecv(buffer.get(), kTimeout, "receive");
        } catch (const std::exception& e) {
          what = e.what();
        }
        if (rank == 0) {
          CHILD_CHECK(rank, what.empty(), "the receive that completed before the loss failed: " + what);
          CHILD_CHECK(rank, data.front() == 7 && data.back() == 7, "data");
        } else {
          CHILD_CHECK(rank, !what.empty(), "a receive from the lost rank must fail");
          CHILD_CHECK(rank, Clock::now() - t0 < kTimeout / 2, "failed at the timeout, not at once: " + what);
        }
        return 0;
      },
      std::chrono::seconds(60));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[1].code, -SIGKILL);
  for (int r : {0, 2}) EXPECT_TRUE(results[static_cast<size_t>(r)].ok()) << "rank " << r;
}

}  // namespace
}  // namespace psync::comm::gloo_ring
