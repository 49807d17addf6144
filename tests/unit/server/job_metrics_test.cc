// What GET /metrics shows of a job (server/job_metrics.h): JobState's
// snapshot (FillMetrics) through a restart, and its text: every series once,
// each family's HELP and TYPE once and before its samples, label values
// escaped, counts that match the reports. No network: JobState with a
// ManualScheduler, as in job_restart_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "common/manual_scheduler.h"
#include "common/prometheus_text.h"
#include "common/refusal_counters.h"
#include "server/job_metrics.h"
#include "server/job_state.h"
#include "tests/unit/server/job_state_test_util.h"

namespace psync::server {
namespace {

using namespace job_state_test;

v1::Report RepOf(int64_t it, double step_ms, double loss, double tokens_per_s) {
  v1::Report r = Rep(it, kFull);
  r.set_last_step_ms(step_ms);
  r.set_loss(loss);
  r.set_tokens_per_s(tokens_per_s);
  return r;
}

// The samples of a rendered text: "name{labels}" -> value. Fails the test
// on a series written twice, a family's HELP/TYPE written twice or after
// its samples, or a sample of an undeclared family.
std::map<std::string, double> Parse(const std::string& text) {
  std::map<std::string, double> samples;
  std::set<std::string> helped, typed, sampled_families;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE((line[2] == 'H' ? helped : typed).insert(name).second) << "twice: " << line;
      EXPECT_EQ(sampled_families.count(name), 0u) << "after its samples: " << line;
      continue;
    }
    const size_t sp = line.rfind(' ');
    const std::string series = line.substr(0, sp);
    std::string family = series.substr(0, series.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (typed.count(family) == 0 && family.size() > s.size() && family.substr(family.size() - s.size()) == s) {
        family = family.substr(0, family.size() - s.size());
      }
    }
    EXPECT_EQ(typed.count(family), 1u) << "no TYPE for " << line;
    sampled_families.insert(family);
    EXPECT_TRUE(samples.emplace(series, std::stod(line.substr(sp + 1))).second) << "series twice: " << line;
  }
  EXPECT_EQ(helped, typed);
  return samples;
}

TEST(JobMetrics, CountsReportsPlansAndLossesThroughARestart) {
  ManualScheduler sched;
  JobConfig cfg = Cfg(2);
  cfg.max_restarts = 1;
  JobState job(cfg, &sched);
  auto g1 = JoinAll(job, {0, 1});
  for (int64_t it = 0; it < 2; ++it) {
    ASSERT_TRUE(job.Report(g1[0].ref, RepOf(it, 10, 2.0, 800)).ok());
    ASSERT_TRUE(job.Report(g1[1].ref, RepOf(it, 20, 2.5, 400)).ok());
  }
  JobMetrics m;
  job.FillMetrics(&m);
  EXPECT_EQ(m.state, v1::JOB_RUNNING);
  EXPECT_EQ(m.iteration, 1);
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[1].iteration, 1);
  EXPECT_DOUBLE_EQ(m.ranks[1].step_ms, 20);
  EXPECT_DOUBLE_EQ(m.ranks[1].loss, 2.5);
  EXPECT_DOUBLE_EQ(m.ranks[1].tokens_per_s, 400);
  EXPECT_GE(m.ranks[1].report_age_s, 0);
  EXPECT_EQ(m.steps.slowest_rank, 1);  // what `psyncctl status` shows
  EXPECT_DOUBLE_EQ(m.steps.slowest_vs_median_pct, (20 - 15) / 15.0 * 100);

  job.StreamClosed(g1[1].ref, "stream closed");  // rank 1 died: generation 2 forms
  auto j0 = StartJoin(job, Req(0));
  auto j1 = StartJoin(job, Req(1));
  ASSERT_TRUE(j1->r.ok()) << j1->r.status();
  std::vector<TestStream> g2 = {AttachOk(job, OwnHello(0, 2)), AttachOk(job, OwnHello(1, 2))};
  for (int64_t it = 0; it < 3; ++it) ReportAll(job, g2, it);
  JobMetrics after;
  job.FillMetrics(&after);
  EXPECT_EQ(after.generation, 2);
  EXPECT_EQ(after.restarts, 1);
  EXPECT_EQ(after.reports, (std::vector<uint64_t>{5, 5}));  // all generations
  EXPECT_EQ(after.lost, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(after.plans, 5u);
  EXPECT_EQ(after.plan_latency.count(), 10u) << "one plan latency per report of an emitted plan";
  EXPECT_GE(after.plan_latency.sum(), 0);

  const std::map<std::string, double> s = Parse(RenderJobMetrics(after, nullptr));
  EXPECT_EQ(s.at("psync_generation"), 2);
  EXPECT_EQ(s.at("psync_restarts_total"), 1);
  // A restart (the default --recovery=restart): rank 1 had reported
  // iteration 1 and generation 2 starts at 0, so 2 iterations came again.
  EXPECT_EQ(s.at("psync_recoveries_total{mode=\"restart\"}"), 1);
  EXPECT_EQ(s.at("psync_recoveries_total{mode=\"live\"}"), 0);
  EXPECT_EQ(s.at("psync_recomputed_iterations_total"), 2);
  EXPECT_GE(s.at("psync_recovery_seconds_total"), 0);
  EXPECT_EQ(s.at("psync_last_recovery_seconds"), s.at("psync_recovery_seconds_total"));
  EXPECT_EQ(s.at("psync_plans_total"), 5);
  EXPECT_EQ(s.at("psync_iteration"), 2);
  EXPECT_EQ(s.at("psync_job_state{state=\"running\"}"), 1);
  EXPECT_EQ(s.at("psync_job_state{state=\"aborted\"}"), 0);
  EXPECT_EQ(s.at("psync_ranks{state=\"training\"}"), 2);
  EXPECT_EQ(s.at("psync_rank_reports_total{rank=\"0\"}"), 5);
  EXPECT_EQ(s.at("psync_rank_lost_total{rank=\"1\"}"), 1);
  EXPECT_EQ(s.at("psync_rank_iteration{rank=\"1\"}"), 2);
  EXPECT_DOUBLE_EQ(s.at("psync_rank_step_seconds{rank=\"0\"}"), 0.01);
  EXPECT_EQ(s.at("psync_plan_latency_seconds_count"), 10);
  EXPECT_EQ(s.at("psync_plan_latency_seconds_bucket{le=\"+Inf\"}"), 10);
  EXPECT_EQ(s.count("psync_refused_calls_total{method=\"other\"}"), 0u) << "no token: no refusals family";
  // Buckets are cumulative.
  double prev = 0;
  for (double le : JobCounters::PlanLatencyBounds()) {
    const double v = s.at("psync_plan_latency_seconds_bucket{le=\"" + PrometheusText::FormatValue(le) + "\"}");
    EXPECT_GE(v, prev);
    prev = v;
  }
}

TEST(JobMetrics, RendersStragglersRefusalsAndEscapedLabels) {
  JobMetrics m;
  m.job_id = "a \"quoted\" job\\ with\na newline";
  m.world_size = 3;
  m.state = v1::JOB_RUNNING;
  m.generation = 1;
  m.reports = {7, 7, 7};
  m.lost = {0, 0, 0};
  for (int r = 0; r < 3; ++r) {
    RankMetrics rm;
    rm.rank = r;
    rm.state = v1::WORKER_TRAINING;
    rm.iteration = 6;
    rm.step_ms = r == 2 ? 150 : 100;
    rm.loss = std::nan("");  // a diverged rank still renders
    rm.tokens_per_s = 1000;
    m.ranks.push_back(rm);
  }
  m.steps = ComputeStepStats({100, 100, 150});
  RefusalCounters refusals({"/psync.v1.Control/Status", "/psync.v1.Coordinator/Join"});
  uint64_t suppressed = 0;
  refusals.Count("/psync.v1.Control/Status", &suppressed);
  refusals.Count("/some/invented", &suppressed);
  const std::string text = RenderJobMetrics(m, &refusals);
  EXPECT_NE(text.find("psync_job_info{job_id=\"a \\\"quoted\\\" job\\\\ with\\na newline\"} 1\n"), std::string::npos)
      << text;
  const std::map<std::string, double> s = Parse(text);
  EXPECT_EQ(s.at("psync_step_slowest_rank"), 2);
  EXPECT_DOUBLE_EQ(s.at("psync_step_slowest_seconds"), 0.15);
  EXPECT_DOUBLE_EQ(s.at("psync_step_median_seconds"), 0.1);
  EXPECT_DOUBLE_EQ(s.at("psync_step_slowest_vs_median_ratio"), 0.5);
  EXPECT_TRUE(std::isnan(s.at("psync_rank_loss{rank=\"0\"}")));
  EXPECT_EQ(s.at("psync_refused_calls_total{method=\"/psync.v1.Control/Status\"}"), 1);
  EXPECT_EQ(s.at("psync_refused_calls_total{method=\"/psync.v1.Coordinator/Join\"}"), 0);
  EXPECT_EQ(s.at("psync_refused_calls_total{method=\"other\"}"), 1);
}

TEST(JobMetrics, BeforeAnyStepRanksHaveNoStepSeries) {
  ManualScheduler sched;
  JobState job(Cfg(2), &sched);
  auto streams = JoinAll(job, {0, 1});
  ASSERT_TRUE(job.Report(streams[0].ref, RepOf(0, 0, 0, 0)).ok());  // iteration 0: no step done yet
  JobMetrics m;
  job.FillMetrics(&m);
  const std::map<std::string, double> s = Parse(RenderJobMetrics(m, nullptr));
  EXPECT_EQ(s.at("psync_rank_iteration{rank=\"0\"}"), 0);
  EXPECT_EQ(s.count("psync_rank_iteration{rank=\"1\"}"), 0u) << "rank 1 has not reported";
  EXPECT_EQ(s.count("psync_rank_step_seconds{rank=\"0\"}"), 0u);
  EXPECT_EQ(s.count("psync_step_slowest_rank"), 0u);
  EXPECT_EQ(s.at("psync_plan_latency_seconds_count"), 0);
}

TEST(JobMetrics, AReportWithABadRateIsAProtocolError) {
  ManualScheduler sched;
  JobState job(Cfg(1), &sched);
  auto streams = JoinAll(job, {0});
  for (double bad : {-1.0, std::nan(""), HUGE_VAL}) {
    const absl::Status st = job.Report(streams[0].ref, RepOf(0, 1, 1, bad));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(Msg(st).find("tokens_per_s"), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace psync::server
