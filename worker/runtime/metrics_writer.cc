#include "worker/runtime/metrics_writer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace psync::runtime {

namespace {

std::string Number(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}

// The step of a line written by Format, or -1.
int64_t StepOf(const std::string& line) {
  const std::string key = "{\"step\": ";
  if (line.compare(0, key.size(), key) != 0) return -1;
  const size_t end = line.find(',', key.size());
  int64_t step = -1;
  if (end == std::string::npos || !absl::SimpleAtoi(line.substr(key.size(), end - key.size()), &step)) return -1;
  return step;
}

}  // namespace

StepMetrics::StepMetrics()
    : val_loss(std::numeric_limits<double>::quiet_NaN()),
      val_accuracy(std::numeric_limits<double>::quiet_NaN()),
      grad_norm(std::numeric_limits<double>::quiet_NaN()) {}

std::string MetricsWriter::Format(const StepMetrics& m) {
  return absl::StrCat("{\"step\": ", m.step, ", \"loss\": ", Number(m.loss), ", \"val_loss\": ", Number(m.val_loss),
                      ", \"val_accuracy\": ", Number(m.val_accuracy), ", \"lr\": ", Number(m.lr),
                      ", \"grad_norm\": ", Number(m.grad_norm), ", \"step_ms\": ", Number(m.step_ms),
                      ", \"tokens_per_s\": ", Number(m.tokens_per_s), "}");
}

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path, int64_t keep_through_step) {
  std::vector<std::string> kept;
  if (keep_through_step >= 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const int64_t step = StepOf(line);
      if (step >= 0 && step <= keep_through_step) kept.push_back(line);
    }
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics: cannot open ", path, " for writing: ", std::strerror(errno)));
  }
  for (const std::string& line : kept) std::fprintf(f, "%s\n", line.c_str());
  std::fflush(f);
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(path, f));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status MetricsWriter::Write(const StepMetrics& m) {
  const std::string line = Format(m);
  if (std::fprintf(file_, "%s\n", line.c_str()) < 0 || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("writing metrics to ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace psync::runtime
