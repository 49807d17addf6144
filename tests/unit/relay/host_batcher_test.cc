// psync-relay's HostBatcher without a network: local streams are fake
// sinks, the upstream stream is whatever Next() hands out, and time moves
// only through a ManualScheduler, so nothing here sleeps or races the clock.
#include "client/relay/host_batcher.h"

#include <gtest/gtest.h>

#include <future>
#include <optional>

#include "common/manual_scheduler.h"

namespace psync::relay {
namespace {

using namespace std::chrono_literals;

// A local worker's stream: the plans it was given and how it ended.
struct FakeSink : LocalSink {
  void Push(std::shared_ptr<const v1::Plan> plan) override { plans.push_back(plan->iteration()); }
  void End(const absl::Status& status) override {
    ++ends;
    if (!end) end = status;
  }
  std::vector<int64_t> plans;
  std::optional<absl::Status> end;
  int ends = 0;
};

BatcherOptions Opts(int expect) {
  BatcherOptions o;
  o.expect_ranks = expect;
  o.form_wait = 2000ms;
  o.max_hold = 2000us;
  return o;
}

v1::Report Rep(int64_t iteration) {
  v1::Report r;
  r.set_iteration(iteration);
  return r;
}

// The ranks of each ReportBatch in a kSend step ("" for other messages).
std::vector<std::vector<int>> Batches(const SendStep& s) {
  std::vector<std::vector<int>> out;
  for (const UpMessage& m : s.messages) {
    std::vector<int> ranks;
    for (const v1::Report& r : m.up.report_batch().reports()) ranks.push_back(r.rank());
    out.push_back(ranks);
  }
  return out;
}

struct Host {
  explicit Host(int expect, int ranks) : b(HostBatcher::Create(Opts(expect), &sched)) {
    for (int r = 0; r < ranks; ++r) {
      sinks.push_back(std::make_shared<FakeSink>());
      EXPECT_TRUE(b->Add(r, sinks.back()));
    }
  }
  Host(const Host&) = delete;
  // Takes the kOpen step (formed: expect == ranks).
  void Open() { EXPECT_EQ(b->Next().kind, SendStep::kOpen); }
  ManualScheduler sched;
  std::shared_ptr<HostBatcher> b;
  std::vector<std::shared_ptr<FakeSink>> sinks;
};

TEST(HostBatcher, OpensOnceEveryExpectedRankSaidHello) {
  ManualScheduler sched;
  auto b = HostBatcher::Create(Opts(2), &sched);
  auto s0 = std::make_shared<FakeSink>(), s1 = std::make_shared<FakeSink>();
  ASSERT_TRUE(b->Add(1, s1));
  EXPECT_EQ(b->Next().kind, SendStep::kWait) << "one of two ranks";
  ASSERT_TRUE(b->Add(0, s0));
  SendStep s = b->Next();
  ASSERT_EQ(s.kind, SendStep::kOpen);
  EXPECT_EQ(s.ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(b->Next().kind, SendStep::kWait) << "kOpen is handed out once";
  EXPECT_FALSE(b->Add(2, std::make_shared<FakeSink>())) << "formed: a later hello needs another batcher";
  EXPECT_EQ(b->size(), 2);
  EXPECT_TRUE(b->HasRank(0));
  EXPECT_FALSE(b->HasRank(2));
  EXPECT_EQ(sched.pending(), 0u) << "the form deadline is cancelled once formed";
}

TEST(HostBatcher, OpensAtTheFormDeadlineWithTheRanksThereAre) {
  ManualScheduler sched;
  auto b = HostBatcher::Create(Opts(3), &sched);
  ASSERT_TRUE(b->Add(2, std::make_shared<FakeSink>()));
  sched.Advance(1000ms);
  ASSERT_TRUE(b->Add(0, std::make_shared<FakeSink>()));
  sched.Advance(999ms);
  EXPECT_EQ(b->Next().kind, SendStep::kWait);
  sched.Advance(1ms);  // form_wait after the first hello, not the last
  SendStep s = b->Next();
  ASSERT_EQ(s.kind, SendStep::kOpen);
  EXPECT_EQ(s.ranks, (std::vector<int>{0, 2}));
}

TEST(HostBatcher, AReportWaitsForTheOtherLiveRanksOfItsIteration) {
  Host h(3, 3);
  h.Open();
  h.b->Report(2, Rep(0));
  h.b->Report(0, Rep(0));
  EXPECT_EQ(h.b->Next().kind, SendStep::kWait);
  h.b->Report(1, Rep(0));
  SendStep s = h.b->Next();
  ASSERT_EQ(s.kind, SendStep::kSend);
  EXPECT_EQ(Batches(s), (std::vector<std::vector<int>>{{0, 1, 2}})) << "one batch for the host, by rank";
  EXPECT_EQ(s.messages[0].up.report_batch().reports(0).iteration(), 0);
  EXPECT_EQ(h.sched.pending(), 0u) << "the hold deadline is cancelled once the batch is complete";
}

TEST(HostBatcher, ALaggingRankHoldsTheOthersAtMostMaxHold) {
  Host h(2, 2);
  h.Open();
  h.b->Report(0, Rep(0));
  h.sched.Advance(1999us);
  EXPECT_EQ(h.b->Next().kind, SendStep::kWait);
  h.sched.Advance(1us);
  SendStep s = h.b->Next();
  ASSERT_EQ(s.kind, SendStep::kSend);
  EXPECT_EQ(Batches(s), (std::vector<std::vector<int>>{{0}})) << "what is there goes up at the bound";
  // The lagging rank's own report is held by the same rule (rank 0's report
  // of iteration 0 already went up).
  h.b->Report(1, Rep(0));
  EXPECT_EQ(h.b->Next().kind, SendStep::kWait);
  h.sched.Advance(2000us);
  EXPECT_EQ(Batches(h.b->Next()), (std::vector<std::vector<int>>{{1}}));
}

TEST(HostBatcher, BatchesGoUpInIterationOrder) {
  Host h(2, 2);
  h.Open();
  h.b->Report(0, Rep(0));
  h.b->Report(0, Rep(1));
  h.b->Report(1, Rep(1));  // iteration 1 is complete, 0 is not
  EXPECT_EQ(h.b->Next().kind, SendStep::kWait) << "iteration 1 waits behind iteration 0";
  h.b->Report(1, Rep(0));
  SendStep s = h.b->Next();
  ASSERT_EQ(s.kind, SendStep::kSend);
  ASSERT_EQ(s.messages.size(), 2u);
  EXPECT_EQ(s.messages[0].up.report_batch().reports(0).iteration(), 0);
  EXPECT_EQ(s.messages[1].up.report_batch().reports(0).iteration(), 1);
}

TEST(HostBatcher, ReportsBeforeTheStreamFormedWaitForIt) {
  Host h(2, 1);
  h.b->Report(0, Rep(0));
  h.b->Report(0, Rep(1));
  h.sched.Advance(1ms);
  EXPECT_EQ(h.b->Next().kind, SendStep::kWait);
  h.sched.Advance(4ms);  // iteration 0 is past the hold bound, but there is no stream yet
  EXPECT_EQ(h.b->Next().kind, SendStep::kWait);
  ASSERT_TRUE(h.b->Add(1, std::make_shared<FakeSink>()));
  EXPECT_EQ(h.b->Next().kind, SendStep::kOpen);
  EXPECT_EQ(Batches(h.b->Next()), (std::vector<std::vector<int>>{{0}, {0}})) << "both overdue once it opens";
  h.b->Report(0, Rep(2));
  h.b->Report(1, Rep(2));
  EXPECT_EQ(Batches(h.b->Next()), (std::vector<std::vector<int>>{{0, 1}})) << "rank 1 counts from the open on";
}

TEST(HostBatcher, HeartbeatsGoUpAsTheyCome) {
  Host h(2, 2);
  h.Open();
  h.b->Report(0, Rep(3));
  v1::Heartbeat hb;
  hb.set_rank(1);
  hb.set_iteration(2);
  h.b->Heartbeat(hb);
  SendStep s = h.b->Next();
  ASSERT_EQ(s.kind, SendStep::kSend);
  ASSERT_EQ(s.messages.size(), 1u);
  EXPECT_EQ(s.messages[0].up.heartbeat().rank(), 1);
  EXPECT_EQ(h.sched.pending(), 1u) << "rank 0's report is still held";
}

TEST(HostBatcher, DoneGoesUpAfterTheRanksHeldReportsAndEndsItsStreamOnceWritten) {
  Host h(2, 2);
  h.Open();
  h.b->Report(0, Rep(0));
  v1::Done d;
  d.set_exit_reason("completed");
  h.b->Done(0, d);
  SendStep s = h.b->Next();
  ASSERT_EQ(s.kind, SendStep::kSend);
  ASSERT_EQ(s.messages.size(), 2u);
  EXPECT_EQ(Batches(s)[0], (std::vector<int>{0}));
  EXPECT_EQ(s.messages[1].up.done().rank(), 0);
  EXPECT_EQ(s.messages[1].up.done().exit_reason(), "completed");
  EXPECT_EQ(s.messages[1].end_rank, 0);
  EXPECT_FALSE(h.sinks[0]->end.has_value()) << "not before the Done is written";
  h.b->DoneWritten(0);
  ASSERT_TRUE(h.sinks[0]->end.has_value());
  EXPECT_TRUE(h.sinks[0]->end->ok());
  // Rank 0 is done: rank 1's reports are no longer held for it.
  h.b->Report(1, Rep(1));
  EXPECT_EQ(Batches(h.b->Next()), (std::vector<std::vector<int>>{{1}}));
}

TEST(HostBatcher, AGoneRankIsReportedClosedAfterItsHeldReports) {
  Host h(2, 2);
  h.Open();
  h.b->Report(1, Rep(4));
  h.b->Gone(1, "stream closed (relayed by psync-relay)");
  SendStep s = h.b->Next();
  ASSERT_EQ(s.kind, SendStep::kSend);
  ASSERT_EQ(s.messages.size(), 2u);
  EXPECT_EQ(Batches(s)[0], (std::vector<int>{1}));
  EXPECT_EQ(s.messages[1].up.rank_closed().rank(), 1);
  EXPECT_EQ(s.messages[1].up.rank_closed().cause(), "stream closed (relayed by psync-relay)");
  h.b->Gone(1, "again");
  EXPECT_EQ(h.b->Next().kind, SendStep::kWait) << "a rank is closed once";
}

TEST(HostBatcher, NothingIsReportedClosedAfterAnAbortOfEveryRank) {
  Host h(2, 2);
  h.Open();
  v1::Plan abort;
  abort.set_iteration(0);
  abort.set_action(v1::ABORT);
  EXPECT_EQ(h.b->Recipients(abort).size(), 2u);
  h.b->Gone(1, "stream closed (relayed by psync-relay)");
  EXPECT_EQ(h.b->Next().kind, SendStep::kWait) << "the generation is over";
}

TEST(HostBatcher, ARankGoneWhileFormingIsNotAnnouncedNorAreItsReports) {
  Host h(3, 2);
  h.b->Report(1, Rep(0));
  h.b->Gone(1, "stream closed");
  EXPECT_FALSE(h.b->HasRank(1));
  auto s2 = std::make_shared<FakeSink>();
  ASSERT_TRUE(h.b->Add(2, s2));
  EXPECT_EQ(h.b->Next().kind, SendStep::kWait) << "two ranks, three expected";
  h.sched.Advance(2000ms);
  SendStep s = h.b->Next();
  ASSERT_EQ(s.kind, SendStep::kOpen);
  EXPECT_EQ(s.ranks, (std::vector<int>{0, 2}));
  h.b->Report(0, Rep(0));
  h.b->Report(2, Rep(0));
  EXPECT_EQ(Batches(h.b->Next()), (std::vector<std::vector<int>>{{0, 2}})) << "rank 1's report is gone with it";
}

TEST(HostBatcher, EveryRankGoneWhileFormingEndsItAtTheDeadline) {
  Host h(2, 1);
  h.b->Gone(0, "stream closed");
  EXPECT_FALSE(h.b->ended());
  h.sched.Advance(2000ms);
  EXPECT_TRUE(h.b->ended());
  EXPECT_EQ(h.b->Next().kind, SendStep::kStop) << "no stream to open";
  EXPECT_FALSE(h.b->Add(0, std::make_shared<FakeSink>()));
}

TEST(HostBatcher, HalfClosesOnceEveryRankIsDoneOrGone) {
  Host h(2, 2);
  h.Open();
  h.b->Done(0, v1::Done());
  EXPECT_EQ(h.b->Next().kind, SendStep::kSend);
  h.b->DoneWritten(0);
  EXPECT_EQ(h.b->Next().kind, SendStep::kWait) << "rank 1 still runs";
  h.b->Gone(1, "stream closed");
  EXPECT_EQ(h.b->Next().kind, SendStep::kSend) << "RankClosed first";
  EXPECT_EQ(h.b->Next().kind, SendStep::kHalfClose);
}

TEST(HostBatcher, PlansGoToEveryLocalStreamOrThoseNamed) {
  Host h(3, 3);
  h.Open();
  v1::Plan all;
  all.set_iteration(7);
  EXPECT_EQ(h.b->Recipients(all).size(), 3u);
  v1::Plan some;
  some.add_ranks(2);
  some.add_ranks(0);
  std::vector<std::shared_ptr<LocalSink>> to = h.b->Recipients(some);
  ASSERT_EQ(to.size(), 2u);
  EXPECT_EQ(to[0], h.sinks[0]);
  EXPECT_EQ(to[1], h.sinks[2]);
  h.b->Done(1, v1::Done());
  h.b->Next();
  h.b->DoneWritten(1);
  EXPECT_EQ(h.b->Recipients(all).size(), 2u) << "a finished stream gets no more plans";
}

TEST(HostBatcher, TheUpstreamEndEndsEveryLocalStreamWithItsStatus) {
  Host h(2, 2);
  h.Open();
  h.b->Report(0, Rep(0));
  h.b->Stop();
  EXPECT_EQ(h.b->Next().kind, SendStep::kStop);
  h.b->End(absl::UnavailableError("coordinator lost"));
  for (auto& s : h.sinks) {
    ASSERT_TRUE(s->end.has_value());
    EXPECT_EQ(s->end->code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(s->end->message(), "coordinator lost");
  }
  EXPECT_TRUE(h.b->ended());
  EXPECT_EQ(h.b->size(), 0);
  EXPECT_FALSE(h.b->HasRank(0));
  EXPECT_EQ(h.sched.pending(), 0u) << "no deadline outlives the end";
  h.b->Report(1, Rep(0));
  h.b->Gone(1, "late");
  EXPECT_EQ(h.b->Next().kind, SendStep::kStop);
  EXPECT_EQ(h.sched.pending(), 0u);
}

TEST(HostBatcher, CancelBeforeTheStreamOpenedEndsTheLocalStreams) {
  Host h(2, 1);
  h.b->Cancel();
  ASSERT_TRUE(h.sinks[0]->end.has_value());
  EXPECT_EQ(h.sinks[0]->end->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(h.sinks[0]->end->message(), "psync-relay is shutting down");
  EXPECT_EQ(h.b->Next().kind, SendStep::kStop);
  EXPECT_FALSE(h.b->Add(1, std::make_shared<FakeSink>()));
  // Once open, Cancel only stops the sender: the stream's end ends them.
  Host open(1, 1);
  open.Open();
  open.b->Cancel();
  EXPECT_EQ(open.b->Next().kind, SendStep::kStop);
  EXPECT_FALSE(open.sinks[0]->end.has_value());
}

TEST(HostBatcher, WaitNextBlocksUntilThereIsAStep) {
  ManualScheduler sched;
  auto b = HostBatcher::Create(Opts(1), &sched);
  auto step = std::async(std::launch::async, [&] { return b->WaitNext(); });
  EXPECT_EQ(step.wait_for(50ms), std::future_status::timeout) << "nothing formed yet";
  ASSERT_TRUE(b->Add(0, std::make_shared<FakeSink>()));
  ASSERT_EQ(step.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(step.get().kind, SendStep::kOpen);
}

TEST(HostBatcher, ADeadlineAfterTheBatcherIsGoneDoesNothing) {
  ManualScheduler sched;
  auto b = HostBatcher::Create(Opts(2), &sched);
  ASSERT_TRUE(b->Add(0, std::make_shared<FakeSink>()));
  b.reset();
  EXPECT_EQ(sched.pending(), 1u);
  sched.Advance(5s);
  EXPECT_EQ(sched.pending(), 0u);
}

}  // namespace
}  // namespace psync::relay
