#include "common/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "psync/common/logging.h"

namespace psync {
namespace {

bool IsNameChar(char c, bool first, bool colon_ok) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
  return alpha || (!first && c >= '0' && c <= '9');
}

bool ValidName(absl::string_view s, bool colon_ok) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!IsNameChar(s[i], i == 0, colon_ok)) return false;
  }
  return true;
}

bool EndsWith(absl::string_view s, absl::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Length of the valid UTF-8 sequence at s[i], 0 if none starts there
// (overlong forms, surrogates and code points above U+10FFFF are invalid).
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return n;
}

// The key of a label set within a family: names sorted, so {a,b} and {b,a}
// are the same series.
std::string SeriesKey(MetricLabels labels) {
  std::sort(labels.begin(), labels.end());
  std::string key;
  for (const auto& [k, v] : labels) absl::StrAppend(&key, k, "\x1f", v, "\x1e");
  return key;
}

}  // namespace

std::string PrometheusText::FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Shortest round-trip digits; plain decimals where they read well (as Go's
  // client writes le="0.0001"), exponents beyond.
  char buf[400];
  const double a = std::fabs(v);
  const std::to_chars_result r = (a == 0 || (a >= 1e-4 && a < 1e15))
                                     ? std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed)
                                     : std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string PrometheusText::EscapeLabelValue(absl::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size();) {
    const size_t n = Utf8Length(v, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD: the format is UTF-8
      ++i;
      continue;
    }
    if (n == 1 && v[i] == '\\') {
      out += "\\\\";
    } else if (n == 1 && v[i] == '"') {
      out += "\\\"";
    } else if (n == 1 && v[i] == '\n') {
      out += "\\n";
    } else {
      out.append(v.data() + i, n);
    }
    i += n;
  }
  return out;
}

void PrometheusText::Family(absl::string_view name, Type type, absl::string_view help) {
  PSYNC_CHECK(ValidName(name, /*colon_ok=*/true)) << "metric name '" << name << "' is not [a-zA-Z_:][a-zA-Z0-9_:]*";
  PSYNC_CHECK(type != Type::kCounter || EndsWith(name, "_total")) << "counter " << name << " must end in _total";
  PSYNC_CHECK(families_.insert(std::string(name)).second) << "metric family " << name << " written twice";
  family_ = std::string(name);
  type_ = type;
  series_.clear();
  std::string escaped;  // HELP escapes only \ and newline
  for (char c : help) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  const char* type_name = type == Type::kGauge ? "gauge" : type == Type::kCounter ? "counter" : "histogram";
  absl::StrAppend(&out_, "# HELP ", name, " ", escaped, "\n# TYPE ", name, " ", type_name, "\n");
}

void PrometheusText::Line(absl::string_view suffix, const MetricLabels& labels, const std::string& extra_label,
                          const std::string& value) {
  absl::StrAppend(&out_, family_, suffix);
  if (!labels.empty() || !extra_label.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      absl::StrAppend(&out_, first ? "" : ",", k, "=\"", EscapeLabelValue(v), "\"");
      first = false;
    }
    if (!extra_label.empty()) absl::StrAppend(&out_, first ? "" : ",", extra_label);
    out_ += '}';
  }
  absl::StrAppend(&out_, " ", value, "\n");
}

void PrometheusText::Sample(const MetricLabels& labels, double value) {
  PSYNC_CHECK(!family_.empty()) << "a sample before any metric family";
  PSYNC_CHECK(type_ != Type::kHistogram) << family_ << " is a histogram: use Histogram()";
  for (const auto& [k, v] : labels) {
    PSYNC_CHECK(ValidName(k, /*colon_ok=*/false) && k.rfind("__", 0) != 0) << family_ << ": bad label name '" << k << "'";
  }
  PSYNC_CHECK(series_.insert(SeriesKey(labels)).second) << family_ << ": a second sample with the same labels";
  Line("", labels, "", FormatValue(value));
}

void PrometheusText::Histogram(const MetricLabels& labels, const std::vector<double>& bounds,
                               const std::vector<uint64_t>& counts, double sum) {
  PSYNC_CHECK(type_ == Type::kHistogram && !family_.empty()) << "Histogram() outside a histogram family";
  PSYNC_CHECK(counts.size() == bounds.size() + 1) << family_ << ": " << counts.size() << " counts for "
                                                 << bounds.size() << " bounds (want bounds + 1)";
  for (const auto& [k, v] : labels) {
    PSYNC_CHECK(ValidName(k, false) && k.rfind("__", 0) != 0 && k != "le") << family_ << ": bad label name '" << k << "'";
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    PSYNC_CHECK(std::isfinite(bounds[i]) && (i == 0 || bounds[i - 1] < bounds[i])) << family_ << ": bad bounds";
  }
  PSYNC_CHECK(series_.insert(SeriesKey(labels)).second) << family_ << ": a second series with the same labels";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    Line("_bucket", labels, absl::StrCat("le=\"", FormatValue(bounds[i]), "\""), std::to_string(cumulative));
  }
  cumulative += counts.back();
  Line("_bucket", labels, "le=\"+Inf\"", std::to_string(cumulative));
  Line("_sum", labels, "", FormatValue(sum));
  Line("_count", labels, "", std::to_string(cumulative));
}

}  // namespace psync
