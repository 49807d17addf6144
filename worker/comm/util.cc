#include "worker/comm/util.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace psync::comm::internal {

std::string FormatBytes(size_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  return absl::StrFormat("%.1f %s", v, units[u]);
}

std::string FormatDuration(std::chrono::milliseconds d) {
  const long long ms = d.count();
  if (ms < 1000) return absl::StrCat(ms, "ms");
  if (ms % 1000 == 0) return absl::StrCat(ms / 1000, "s");
  return absl::StrFormat("%.1fs", static_cast<double>(ms) / 1000.0);
}

std::string QuoteJoin(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) out += ", ";
    absl::StrAppend(&out, "'", keys[i], "'");
  }
  return out;
}

}  // namespace psync::comm::internal
