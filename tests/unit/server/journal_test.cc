// The coordinator's durable journal (--state-dir; server/journal.h,
// server/job_journal.h): each coordinator takes an epoch above every one in
// the dir and writes only its own file; a coordinator started again keeps
// the restart count, the event log (with its seq), the counters, a job's
// end and a shutdown that no plan carried yet; a replaced coordinator can
// neither write the journal nor send a plan (fencing through the dir).
// Real files in a temporary dir; no network, no clock (ManualScheduler).
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/manual_scheduler.h"
#include "server/job_journal.h"
#include "server/job_metrics.h"
#include "server/job_resume.h"
#include "server/job_state.h"
#include "server/journal.h"
#include "server/journal_writer.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/server/job_state_test_util.h"

namespace psync::server {
namespace {

using namespace job_state_test;

JobConfig EpochCfg(int world, int64_t epoch) {
  JobConfig c = Cfg(world);
  c.epoch = epoch;
  return c;
}

std::unique_ptr<Journal> OpenOk(const std::string& dir, const JobConfig& cfg, int64_t wanted) {
  absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(dir, cfg, wanted);
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? std::move(*j) : nullptr;
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

// Rank `rank` of generation 1 (world 2, K = 2) resuming with a new
// coordinator, holding the plans before `next_plan`.
v1::Hello ResumeOf(int rank, int64_t next_plan, int64_t epoch) {
  v1::Hello h = OwnHello(rank, 1);
  v1::Resume* r = h.mutable_resume();
  *r->mutable_join() = Req(rank);
  r->set_world_size(2);
  r->set_start_iteration(0);
  r->set_plan_lookahead(2);
  r->set_next_plan(next_plan);
  r->set_bucket_plan_announced_in(-1);
  r->set_stop_after(-1);
  r->set_epoch(epoch);
  return h;
}

TEST(Journal, EachCoordinatorTakesAnEpochAboveTheNewestAndReadsItsJournal) {
  test_support::TempDir dir("psync-journal");
  const JobConfig cfg = Cfg(2);
  std::unique_ptr<Journal> first = OpenOk(dir.File("state"), cfg, 1000);
  ASSERT_NE(first, nullptr);
  EXPECT_FALSE(first->previous().has_value()) << "a fresh dir (created by Open)";
  EXPECT_EQ(first->epoch(), 1000);
  v1::JournalState s;
  s.set_restarts(3);
  ASSERT_TRUE(first->Write(s).ok());

  // The clock went back: the next epoch is still above the newest.
  std::unique_ptr<Journal> second = OpenOk(dir.File("state"), cfg, 500);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->epoch(), 1001);
  ASSERT_TRUE(second->previous().has_value());
  EXPECT_EQ(second->previous()->restarts(), 3);
  EXPECT_EQ(second->previous()->epoch(), 1000);
  EXPECT_EQ(second->previous()->job_id(), "job");
  EXPECT_EQ(first->NewerEpoch(), 0) << "the successor wrote nothing yet";

  ASSERT_TRUE(second->Write(s).ok());
  EXPECT_TRUE(Exists(dir.File("state/" + JournalFileName(1001))));
  EXPECT_FALSE(Exists(dir.File("state/" + JournalFileName(1000)))) << "the older epoch's file goes once the new one is on disk";

  // The replaced coordinator: fenced, and its write changes nothing.
  EXPECT_EQ(first->NewerEpoch(), 1001);
  absl::Status st = first->Write(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(st).find("coordinator epoch 1001 took over"), std::string::npos) << st;
  EXPECT_FALSE(Exists(dir.File("state/" + JournalFileName(1000))));
}

TEST(Journal, AnotherJobsStateDirAndACorruptJournalAreRefusedNamingWhat) {
  test_support::TempDir dir("psync-journal");
  std::unique_ptr<Journal> j = OpenOk(dir.path(), Cfg(2), 1000);
  ASSERT_TRUE(j->Write(v1::JournalState()).ok());

  absl::StatusOr<std::unique_ptr<Journal>> other = Journal::Open(dir.path(), Cfg(4), 2000);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(Msg(other.status()).find("holds job 'job' of world size 2"), std::string::npos) << other.status();
  EXPECT_NE(Msg(other.status()).find("not job 'job' of world size 4"), std::string::npos) << other.status();

  std::ofstream(dir.File(JournalFileName(3000)), std::ios::binary) << "not a journal \xff\xff\xff";
  absl::StatusOr<std::unique_ptr<Journal>> corrupt = Journal::Open(dir.path(), Cfg(2), 4000);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Msg(corrupt.status()).find(JournalFileName(3000)), std::string::npos) << corrupt.status();

  std::ofstream(dir.File("plain-file")) << "x";
  absl::StatusOr<std::unique_ptr<Journal>> not_dir = Journal::Open(dir.File("plain-file"), Cfg(2), 1);
  EXPECT_FALSE(not_dir.ok());
  EXPECT_NE(Msg(not_dir.status()).find("is not a directory"), std::string::npos) << not_dir.status();
}

TEST(JobJournal, ACoordinatorStartedAgainKeepsTheCountersTheEventsAndTheirSeq) {
  ManualScheduler sched;
  JobState old(EpochCfg(2, 100), &sched);
  std::vector<TestStream> s = JoinAll(old, {0, 1});
  for (int64_t i = 0; i < 4; ++i) ReportAll(old, s, i);
  const v1::JournalState kept = JobJournal::Snapshot(old);
  EXPECT_EQ(kept.state(), v1::JOB_RUNNING);
  EXPECT_EQ(kept.iteration(), 3);
  EXPECT_EQ(kept.plans(), 4u);
  const int64_t last_seq = old.events().last_seq();
  ASSERT_GT(last_seq, 2);

  JobState fresh(EpochCfg(2, 200), &sched);
  JobJournal::Restore(fresh, kept, "/state");
  JobJournal::SetLeaseCheck(fresh, [] { return int64_t{0}; });
  const std::vector<v1::Event> events = fresh.events().After(0);
  ASSERT_EQ(static_cast<int64_t>(events.size()), last_seq + 1);
  EXPECT_EQ(events[0].seq(), 1) << "the old log, with its seq";
  EXPECT_EQ(events.back().seq(), last_seq + 1);
  EXPECT_EQ(events.back().type(), v1::EVENT_COORDINATOR_RESTARTED);
  EXPECT_NE(events.back().message().find("restart 1 on --state-dir /state"), std::string::npos) << events.back().message();
  EXPECT_NE(events.back().message().find("JOB_RUNNING at generation 1, iteration 3"), std::string::npos);

  v1::StatusResponse st;
  fresh.FillStatus(&st);
  EXPECT_EQ(st.coordinator_restarts(), 1);
  EXPECT_EQ(st.coordinator_epoch(), 200);
  JobMetrics m;
  fresh.FillMetrics(&m);
  const std::string text = RenderJobMetrics(m, nullptr);
  EXPECT_NE(text.find("\npsync_plans_total 4\n"), std::string::npos) << "counters go on from the journal:\n" << text;
  EXPECT_NE(text.find("\npsync_coordinator_restarts_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\npsync_coordinator_epoch 200\n"), std::string::npos) << text;
  const v1::JournalState again = JobJournal::Snapshot(fresh);
  EXPECT_EQ(again.plans(), 4u) << "/metrics counters go on from the journal";
  ASSERT_EQ(again.reports_size(), 2);
  EXPECT_EQ(again.reports(0), 4u);
  EXPECT_EQ(again.coordinator_restarts(), 1);

  // The workers resume with it; the plans go on.
  TestStream r0 = AttachOk(fresh, ResumeOf(0, 4, 100));
  TestStream r1 = AttachOk(fresh, ResumeOf(1, 4, 100));
  EXPECT_EQ(fresh.state(), v1::JOB_RUNNING);
  ReportAll(fresh, {r0, r1}, 2);
  ReportAll(fresh, {r0, r1}, 3);
  ReportAll(fresh, {r0, r1}, 4);
  EXPECT_EQ(JobJournal::Snapshot(fresh).plans(), 7u) << "on top of the old 4: plans 2 and 3 sent again, and plan 4";
}

TEST(JobJournal, AShutdownNoPlanCarriedIsAskedAgainOnceTheWorkersResume) {
  ManualScheduler sched;
  JobState old(EpochCfg(2, 100), &sched);
  std::vector<TestStream> s = JoinAll(old, {0, 1});
  for (int64_t i = 0; i < 3; ++i) ReportAll(old, s, i);
  old.Shutdown("psyncctl shutdown");
  ASSERT_EQ(old.state(), v1::JOB_STOPPING);
  const v1::JournalState kept = JobJournal::Snapshot(old);  // then it dies before the next plan

  JobState fresh(EpochCfg(2, 200), &sched);
  JobJournal::Restore(fresh, kept, "/state");
  EXPECT_EQ(fresh.state(), v1::JOB_WAITING) << "nobody resumed yet";
  TestStream r0 = AttachOk(fresh, ResumeOf(0, 3, 100));
  TestStream r1 = AttachOk(fresh, ResumeOf(1, 3, 100));
  EXPECT_EQ(fresh.state(), v1::JOB_STOPPING);
  v1::StatusResponse st;
  fresh.FillStatus(&st);
  EXPECT_EQ(st.reason(), "psyncctl shutdown");
  EXPECT_EQ(st.stop_after_iteration(), 4) << "p + K - 1 from the first plan the workers lack (3)";
  // The reports again, back to next_plan - 2K: plans 1 and 2 come again
  // (the workers drop them: they hold them), plan 3 is the first they obey.
  for (int64_t i = 1; i <= 3; ++i) ReportAll(fresh, {r0, r1}, i);
  EXPECT_EQ(Next(*r0).iteration(), 1);
  EXPECT_EQ(Next(*r0).iteration(), 2);
  const v1::Plan p = Next(*r0);
  EXPECT_EQ(p.iteration(), 3);
  EXPECT_EQ(p.stop_after_iteration(), 4);
  EXPECT_EQ(p.action(), v1::STOP_AFTER);
}

// The coordinator died while the world formed its next generation (a rank
// was lost; the survivors Join generation 2): the one started again opens
// generation 2 again, so their Joins are taken, and the restart count goes on.
TEST(JobJournal, AGenerationBeingFormedIsOpenedAgain) {
  ManualScheduler sched;
  JobConfig cfg = EpochCfg(2, 100);
  cfg.max_restarts = 3;
  JobState old(cfg, &sched);
  std::vector<TestStream> s = JoinAll(old, {0, 1});
  ReportAll(old, s, 0);
  old.StreamClosed(s[1].ref, "killed");
  ASSERT_EQ(old.state(), v1::JOB_WAITING);
  ASSERT_EQ(old.generation(), 2);
  const v1::JournalState kept = JobJournal::Snapshot(old);

  cfg.epoch = 200;
  JobState fresh(cfg, &sched);
  JobJournal::Restore(fresh, kept, "/state");
  EXPECT_EQ(fresh.generation(), 2);
  EXPECT_EQ(fresh.restarts(), 1);
  v1::StatusResponse st;
  fresh.FillStatus(&st);
  EXPECT_NE(st.last_restart_reason().find("lost"), std::string::npos) << st.last_restart_reason();
  std::vector<std::shared_ptr<Joined>> js;
  for (int r = 0; r < 2; ++r) {
    v1::JoinRequest req = Req(r);
    req.set_generation(2);
    js.push_back(StartJoin(fresh, req));
  }
  for (const auto& j : js) {
    ASSERT_TRUE(j->done);
    ASSERT_TRUE(j->r.ok()) << j->r.status();
    EXPECT_EQ(j->r->generation(), 2);
  }
  EXPECT_EQ(fresh.state(), v1::JOB_RUNNING);
}

TEST(JobJournal, AnEndedJobStaysEndedAndJoinsAreRefused) {
  ManualScheduler sched;
  JobState old(EpochCfg(2, 100), &sched);
  old.Shutdown("done early");
  ASSERT_EQ(old.state(), v1::JOB_FINISHED);
  JobState fresh(EpochCfg(2, 200), &sched);
  JobJournal::Restore(fresh, JobJournal::Snapshot(old), "/state");
  EXPECT_EQ(fresh.state(), v1::JOB_FINISHED);
  EXPECT_TRUE(fresh.Ended());
  std::shared_ptr<Joined> j = StartJoin(fresh, Req(0));
  ASSERT_TRUE(j->done);
  EXPECT_FALSE(j->r.ok());
  EXPECT_NE(Msg(j->r.status()).find("has finished"), std::string::npos) << j->r.status();
}

TEST(JobJournal, AReplacedCoordinatorSendsNoPlanAndStops) {
  ManualScheduler sched;
  JobState job(EpochCfg(2, 100), &sched);
  int64_t newer = 0;
  std::string fenced;
  JobJournal::SetLeaseCheck(job, [&newer] { return newer; });
  JobResume::SetFencedHook(job, [&fenced](const std::string& why) { fenced = why; });
  std::vector<TestStream> s = JoinAll(job, {0, 1});
  ReportAll(job, s, 0);
  EXPECT_EQ(s[0]->size(), 1u);
  newer = 300;  // another coordinator took the state dir
  ReportAll(job, s, 1);
  EXPECT_EQ(s[0]->size(), 1u) << "no plan from a replaced coordinator";
  EXPECT_NE(fenced.find("coordinator epoch 300 took over"), std::string::npos) << fenced;
  EXPECT_NE(fenced.find("(epoch 100)"), std::string::npos) << fenced;
  EXPECT_FALSE(job.Attach(ResumeOf(0, 1, 100), std::make_shared<PlanQueue>()).ok()) << "nor takes a rank back";
}

TEST(JobJournal, WithoutAJournalTheRestartCountOfAnAdoptingCoordinatorIsUnknown) {
  ManualScheduler sched;
  JobState fresh(EpochCfg(2, 200), &sched);
  v1::StatusResponse st;
  fresh.FillStatus(&st);
  EXPECT_EQ(st.coordinator_restarts(), 0) << "a coordinator that met no job is the first, as far as it knows";
  AttachOk(fresh, ResumeOf(0, 3, 100));
  fresh.FillStatus(&st);
  EXPECT_EQ(st.coordinator_restarts(), -1);
  JobMetrics m;
  fresh.FillMetrics(&m);
  EXPECT_EQ(RenderJobMetrics(m, nullptr).find("psync_coordinator_restarts_total"), std::string::npos)
      << "unknown: no series rather than a guess";
}

// The writer keeps the journal current while the job runs: its thread
// writes as events come (the event log's subscriber runs under JobState's
// lock, and the write takes it for the snapshot: a lock order that must not
// deadlock), and Stop leaves the job's end on disk.
TEST(JournalWriter, KeepsTheJournalCurrentWhileTheJobRuns) {
  test_support::TempDir dir("psync-journal");
  ManualScheduler sched;
  JobState job(EpochCfg(2, 1000), &sched);
  std::unique_ptr<Journal> journal = OpenOk(dir.path(), job.config(), 1000);
  ASSERT_NE(journal, nullptr);
  JournalWriter writer(&job, std::move(journal), std::chrono::milliseconds(1));
  std::vector<TestStream> s = JoinAll(job, {0, 1});
  for (int64_t i = 0; i < 300; ++i) {
    ReportAll(job, s, i);
    if (i % 50 == 0) job.Heartbeat(s[0].ref, v1::Heartbeat());
  }
  job.Shutdown("enough");
  ReportAll(job, s, 300);
  ASSERT_TRUE(writer.Flush().ok());
  writer.Stop();

  std::unique_ptr<Journal> next = OpenOk(dir.path(), job.config(), 1);
  ASSERT_TRUE(next->previous().has_value());
  EXPECT_EQ(next->previous()->epoch(), 1000);
  EXPECT_EQ(next->previous()->plans(), 301u);
  EXPECT_EQ(next->previous()->state(), v1::JOB_STOPPING);
  EXPECT_EQ(next->previous()->reason(), "enough");
  EXPECT_EQ(next->previous()->events_size(), job.events().last_seq());
}

}  // namespace
}  // namespace psync::server
