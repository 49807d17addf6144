// common/prometheus_text.h and common/fixed_histogram.h: the exact text of
// the exposition format, escaping, value spelling, cumulative histogram
// buckets, and the rules a caller cannot break (no duplicate series, each
// family once, counters end in _total, valid names).
#include "common/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/fixed_histogram.h"
#include "psync/common/logging.h"

namespace psync {
namespace {

using Type = PrometheusText::Type;

TEST(PrometheusText, WritesHelpTypeAndSamplesOfEachFamily) {
  PrometheusText t;
  t.Family("psync_rank_iteration", Type::kGauge, "Last iteration the rank reported.");
  t.Sample({{"rank", "0"}}, 41);
  t.Sample({{"rank", "1"}}, 40);
  t.Family("psync_restarts_total", Type::kCounter, "Restarts.");
  t.Sample(2);
  EXPECT_EQ(t.text(),
            "# HELP psync_rank_iteration Last iteration the rank reported.\n"
            "# TYPE psync_rank_iteration gauge\n"
            "psync_rank_iteration{rank=\"0\"} 41\n"
            "psync_rank_iteration{rank=\"1\"} 40\n"
            "# HELP psync_restarts_total Restarts.\n"
            "# TYPE psync_restarts_total counter\n"
            "psync_restarts_total 2\n");
}

TEST(PrometheusText, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(PrometheusText::EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(PrometheusText::EscapeLabelValue("caf\xC3\xA9 \xE2\x82\xAC"), "caf\xC3\xA9 \xE2\x82\xAC");  // valid UTF-8 kept
  // Invalid UTF-8 (a lone continuation byte, a truncated sequence, an
  // overlong '/', a surrogate) becomes U+FFFD, byte by byte.
  EXPECT_EQ(PrometheusText::EscapeLabelValue("x\x80y"), "x\xEF\xBF\xBDy");
  EXPECT_EQ(PrometheusText::EscapeLabelValue("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(PrometheusText::EscapeLabelValue("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(PrometheusText::EscapeLabelValue("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(PrometheusText::EscapeLabelValue(std::string("a\0b", 3)), std::string("a\0b", 3));

  PrometheusText t;
  t.Family("psync_job_info", Type::kGauge, "Help with a \\ and a\nnewline.");
  t.Sample({{"job_id", "my \"job\"\n"}}, 1);
  EXPECT_EQ(t.text(),
            "# HELP psync_job_info Help with a \\\\ and a\\nnewline.\n"
            "# TYPE psync_job_info gauge\n"
            "psync_job_info{job_id=\"my \\\"job\\\"\\n\"} 1\n");
}

TEST(PrometheusText, SpellsValuesAsPrometheusDoes) {
  EXPECT_EQ(PrometheusText::FormatValue(0), "0");
  EXPECT_EQ(PrometheusText::FormatValue(41), "41");
  EXPECT_EQ(PrometheusText::FormatValue(-1), "-1");
  EXPECT_EQ(PrometheusText::FormatValue(0.1), "0.1");
  EXPECT_EQ(PrometheusText::FormatValue(2.5e-5), "2.5e-05");
  EXPECT_EQ(PrometheusText::FormatValue(0.0001), "0.0001");
  EXPECT_EQ(PrometheusText::FormatValue(0.00025), "0.00025");
  EXPECT_EQ(PrometheusText::FormatValue(1e300), "1e+300");
  EXPECT_EQ(PrometheusText::FormatValue(-0.0), "-0");
  EXPECT_EQ(PrometheusText::FormatValue(12345678901234.0), "12345678901234");
  EXPECT_EQ(PrometheusText::FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(PrometheusText::FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(PrometheusText::FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(PrometheusText, HistogramBucketsAreCumulativeAndEndInInf) {
  FixedHistogram h({0.001, 0.01, 0.1});
  for (double v : {0.0005, 0.001, 0.002, 0.05, 0.05, 7.0}) h.Observe(v);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 1, 2, 1}));  // 0.001 counts in le="0.001"
  EXPECT_EQ(h.count(), 6u);
  EXPECT_DOUBLE_EQ(h.sum(), 7.1035);
  h.Observe(std::nan(""));  // counts above every bound, adds nothing to the sum
  EXPECT_EQ(h.counts().back(), 2u);
  EXPECT_DOUBLE_EQ(h.sum(), 7.1035);

  PrometheusText t;
  t.Family("psync_plan_latency_seconds", Type::kHistogram, "Latency.");
  t.Histogram({}, {0.001, 0.01, 0.1}, {2, 1, 2, 1}, 7.25);
  EXPECT_EQ(t.text(),
            "# HELP psync_plan_latency_seconds Latency.\n"
            "# TYPE psync_plan_latency_seconds histogram\n"
            "psync_plan_latency_seconds_bucket{le=\"0.001\"} 2\n"
            "psync_plan_latency_seconds_bucket{le=\"0.01\"} 3\n"
            "psync_plan_latency_seconds_bucket{le=\"0.1\"} 5\n"
            "psync_plan_latency_seconds_bucket{le=\"+Inf\"} 6\n"
            "psync_plan_latency_seconds_sum 7.25\n"
            "psync_plan_latency_seconds_count 6\n");

  PrometheusText labelled;
  labelled.Family("x_seconds", Type::kHistogram, "h");
  labelled.Histogram({{"rank", "3"}}, {1}, {4, 0}, 2);
  EXPECT_NE(labelled.text().find("x_seconds_bucket{rank=\"3\",le=\"1\"} 4\n"), std::string::npos) << labelled.text();
}

TEST(PrometheusText, RefusesDuplicateSeriesAndFamilies) {
  PrometheusText t;
  t.Family("psync_rank_loss", Type::kGauge, "Loss.");
  t.Sample({{"rank", "0"}, {"generation", "1"}}, 1);
  EXPECT_THROW(t.Sample({{"rank", "0"}, {"generation", "1"}}, 2), InternalError);
  EXPECT_THROW(t.Sample({{"generation", "1"}, {"rank", "0"}}, 2), InternalError);  // same set, other order
  t.Sample({{"rank", "1"}, {"generation", "1"}}, 3);
  EXPECT_THROW(t.Family("psync_rank_loss", Type::kGauge, "again"), InternalError);
  // The refused samples wrote nothing.
  EXPECT_EQ(t.text(),
            "# HELP psync_rank_loss Loss.\n# TYPE psync_rank_loss gauge\n"
            "psync_rank_loss{rank=\"0\",generation=\"1\"} 1\n"
            "psync_rank_loss{rank=\"1\",generation=\"1\"} 3\n");

  PrometheusText h;
  h.Family("y_seconds", Type::kHistogram, "h");
  h.Histogram({}, {1}, {1, 1}, 1);
  EXPECT_THROW(h.Histogram({}, {1}, {1, 1}, 1), InternalError);
}

TEST(PrometheusText, RefusesWhatBreaksTheFormat) {
  PrometheusText t;
  EXPECT_THROW(t.Sample(1), InternalError);  // no family yet
  EXPECT_THROW(t.Family("psync_reports", Type::kCounter, "a counter not named *_total"), InternalError);
  EXPECT_THROW(t.Family("9lives", Type::kGauge, "bad name"), InternalError);
  EXPECT_THROW(t.Family("psync-rank", Type::kGauge, "bad name"), InternalError);
  EXPECT_THROW(t.Family("", Type::kGauge, "bad name"), InternalError);
  t.Family("psync_ok", Type::kGauge, "ok");
  EXPECT_THROW(t.Sample({{"bad-label", "x"}}, 1), InternalError);
  EXPECT_THROW(t.Sample({{"__reserved", "x"}}, 1), InternalError);
  EXPECT_THROW(t.Histogram({}, {1}, {1, 1}, 1), InternalError);  // a gauge
  t.Family("z_seconds", Type::kHistogram, "h");
  EXPECT_THROW(t.Sample(1), InternalError);                            // a histogram
  EXPECT_THROW(t.Histogram({{"le", "1"}}, {1}, {1, 1}, 1), InternalError);  // le is the histogram's
  EXPECT_THROW(t.Histogram({}, {1, 2}, {1, 1}, 1), InternalError);          // counts != bounds + 1
  EXPECT_THROW(t.Histogram({}, {2, 1}, {1, 1, 1}, 1), InternalError);       // bounds not increasing
  EXPECT_THROW(FixedHistogram({1, 1}), InternalError);
  EXPECT_THROW(FixedHistogram({std::numeric_limits<double>::infinity()}), InternalError);
}

}  // namespace
}  // namespace psync
