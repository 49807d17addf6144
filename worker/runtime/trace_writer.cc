#include "worker/runtime/trace_writer.h"

#include <cstdio>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/json.h"

namespace psync::runtime {

TraceWriter::TraceWriter(bool enabled, int rank, size_t max_events)
    : enabled_(enabled), rank_(rank), max_events_(max_events), origin_(Clock::now()) {}

int64_t TraceWriter::Micros(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

void TraceWriter::Complete(const std::string& name, const std::string& category, Track track,
                           Clock::time_point begin, Clock::time_point end,
                           const std::map<std::string, std::string>& args) {
  if (!enabled_) return;
  Event e{name, category, 'X', track, Micros(begin), std::max<int64_t>(0, Micros(end) - Micros(begin)), args};
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(e));
}

void TraceWriter::Instant(const std::string& name, const std::string& category, Track track, Clock::time_point at,
                          const std::map<std::string, std::string>& args) {
  if (!enabled_) return;
  Event e{name, category, 'i', track, Micros(at), 0, args};
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(e));
}

TraceWriter::Scope::Scope(TraceWriter* w, std::string name, std::string category, Track track,
                          std::map<std::string, std::string> args)
    : w_(w && w->enabled() ? w : nullptr), name_(std::move(name)), category_(std::move(category)), track_(track),
      args_(std::move(args)), begin_(w_ ? w_->Now() : Clock::time_point()) {}

TraceWriter::Scope::~Scope() {
  if (w_) w_->Complete(name_, category_, track_, begin_, w_->Now(), args_);
}

size_t TraceWriter::num_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

absl::Status TraceWriter::Write(const std::string& path) const {
  std::ostringstream f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    f << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":" << rank_ << ",\"dropped_events\":" << dropped_
      << "},\n\"traceEvents\":[\n";
    // Metadata: process and thread names.
    f << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << rank_ << ",\"tid\":0,\"args\":{\"name\":\"rank "
      << rank_ << "\"}},\n";
    f << "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" << rank_ << ",\"tid\":0,\"args\":{\"sort_index\":"
      << rank_ << "}}";
    const char* tracks[] = {"", "main", "autograd", "comm", "control"};
    for (int t = 1; t <= 4; ++t) {
      f << ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << rank_ << ",\"tid\":" << t
        << ",\"args\":{\"name\":\"" << tracks[t] << "\"}}";
      f << ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" << rank_ << ",\"tid\":" << t
        << ",\"args\":{\"sort_index\":" << t << "}}";
    }
    for (const Event& e : events_) {
      f << ",\n{\"name\":" << json::Quote(e.name) << ",\"cat\":" << json::Quote(e.category) << ",\"ph\":\""
        << e.phase << "\",\"pid\":" << rank_ << ",\"tid\":" << e.track << ",\"ts\":" << e.ts_us;
      if (e.phase == 'X') f << ",\"dur\":" << e.dur_us;
      if (e.phase == 'i') f << ",\"s\":\"t\"";
      if (!e.args.empty()) {
        f << ",\"args\":{";
        bool first = true;
        for (const auto& [k, v] : e.args) {
          f << (first ? "" : ",") << json::Quote(k) << ":" << json::Quote(v);
          first = false;
        }
        f << "}";
      }
      f << "}";
    }
    f << "\n]}\n";
  }
  absl::Status st = WriteFileAtomically(path, f.str());
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("--trace: ", st.message()));
  return absl::OkStatus();
}

}  // namespace psync::runtime
