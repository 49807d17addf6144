#include "worker/runtime/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/json.h"

namespace psync::runtime {

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(values.size() - 1, lo + 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

std::vector<double> RunSummary::TimedSteps() const {
  if (step_ms.size() <= 10) return step_ms;
  return std::vector<double>(step_ms.begin() + 10, step_ms.end());
}

std::string RunSummary::ToJson() const {
  auto num = [](double v) -> json::Value {
    if (!std::isfinite(v)) return json::Value();  // null
    return json::Value(v);
  };
  json::Value o = json::Value::MakeObject();
  o.Set("rank", rank)
      .Set("world_size", world_size)
      .Set("steps_requested", steps_requested)
      .Set("steps_completed", steps_completed)
      .Set("final_loss", num(final_loss))
      .Set("median_step_ms", num(median_step_ms()))
      .Set("p90_step_ms", num(p90_step_ms()))
      .Set("timed_steps", static_cast<int64_t>(TimedSteps().size()))
      .Set("exit_reason", exit_reason)
      .Set("exit_code", exit_code)
      .Set("backend", backend)
      .Set("device", device)
      .Set("total_s", num(total_s));
  return json::Serialize(o, /*pretty=*/true) + "\n";
}

absl::Status RunSummary::WriteJson(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return absl::InternalError(absl::StrCat("--summary: cannot write ", path));
    f << ToJson();
    f.flush();
    if (!f) return absl::InternalError(absl::StrCat("--summary: error writing ", path));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("--summary: cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace psync::runtime
