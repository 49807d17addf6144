// PrometheusText: writes the Prometheus text exposition format, version
// 0.0.4 (what GET /metrics answers, common/metrics_http_server.h):
//
//   # HELP psync_rank_iteration Last iteration the rank reported.
//   # TYPE psync_rank_iteration gauge
//   psync_rank_iteration{rank="0"} 41
//
// It keeps the format's rules so its callers cannot break them: each family
// once, its HELP and TYPE first and its samples together; no two samples of
// a family with the same labels; label values escaped (\ " and newline) and
// made valid UTF-8; counters named *_total; histogram buckets cumulative
// and ending in le="+Inf", then _sum and _count; NaN and +-Inf spelt as
// Prometheus does. Breaking a rule is a bug in the caller: PSYNC_CHECK
// throws psync::InternalError (MetricsHttpServer answers 500 and stays up).
//
// Threads: none of its own; one writer.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace psync {

// Label name -> value, in the order they are written.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  enum class Type { kGauge, kCounter, kHistogram };

  // Starts family `name` (HELP and TYPE lines); the samples that follow are
  // its own. A counter's name must end in _total.
  void Family(absl::string_view name, Type type, absl::string_view help);
  // A sample of the current gauge or counter family.
  void Sample(const MetricLabels& labels, double value);
  void Sample(double value) { Sample({}, value); }
  // A series of the current histogram family: `bounds` increasing and
  // finite, `counts` per bucket, not cumulative (FixedHistogram::counts():
  // bounds.size() + 1 of them, the last above every bound), `sum` of the
  // values. Writes NAME_bucket{...,le="B"} (cumulative), le="+Inf",
  // NAME_sum and NAME_count.
  void Histogram(const MetricLabels& labels, const std::vector<double>& bounds,
                 const std::vector<uint64_t>& counts, double sum);

  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

  // How Prometheus spells a sample value: shortest round-trip decimal,
  // "NaN", "+Inf", "-Inf".
  static std::string FormatValue(double v);
  // A label value as written between the quotes: \ " and newline escaped,
  // invalid UTF-8 bytes replaced by U+FFFD.
  static std::string EscapeLabelValue(absl::string_view v);

 private:
  void Line(absl::string_view suffix, const MetricLabels& labels, const std::string& extra_label,
            const std::string& value);

  std::string out_;
  std::string family_;
  Type type_ = Type::kGauge;
  std::unordered_set<std::string> families_;  // every family started
  std::unordered_set<std::string> series_;    // the current family's label sets
};

}  // namespace psync
