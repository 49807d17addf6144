// The --trace output (worker/runtime/trace_writer.h) is valid JSON in the
// Chrome Trace Event Format, with the metadata, names and fields the viewers
// need.
#include "worker/runtime/trace_writer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/json.h"
#include "tests/common/temp_dir.h"

namespace psync::runtime {
namespace {

using std::chrono::microseconds;

json::Json ReadJson(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<json::Json> v = json::Parse(ss.str());
  EXPECT_TRUE(v.ok()) << v.status() << "\n" << ss.str();
  return v.ok() ? *v : json::Json();
}

// The member `key` of object `o`, or null.
const json::Json* Find(const json::Json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

// The events of `trace` named `name` (any phase).
std::vector<const json::Json*> Named(const json::Json& trace, const std::string& name) {
  std::vector<const json::Json*> out;
  const json::Json* events = Find(trace, "traceEvents");
  if (events == nullptr || !events->is_array()) return out;
  for (const json::Json& e : *events) {
    const json::Json* n = Find(e, "name");
    if (n != nullptr && n->is_string() && n->get<std::string>() == name) out.push_back(&e);
  }
  return out;
}

std::string Str(const json::Json& e, const char* key) {
  const json::Json* v = Find(e, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : "<missing " + std::string(key) + ">";
}
int64_t Int(const json::Json& e, const char* key) {
  const json::Json* v = Find(e, key);
  return v != nullptr && v->is_number_integer() ? v->get<int64_t>() : -999999;
}

TEST(TraceWriter, WritesValidChromeTraceJson) {
  test_support::TempDir dir("psync_runtime_trace");
  TraceWriter w(true, 2);
  const auto t0 = w.Now();
  w.Complete("forward", "main", TraceWriter::kMain, t0, t0 + microseconds(5000), {{"step", "3"}});
  w.Instant("launch bucket 0", "ddp", TraceWriter::kMain, t0 + microseconds(100));
  w.Complete("allreduce bucket 0", "comm", TraceWriter::kComm, t0 + microseconds(100), t0 + microseconds(900));
  w.Complete("quote \" and \\ and \n", "main", TraceWriter::kControl, t0, t0);
  { TraceWriter::Scope scope(&w, "optimizer", "main"); }
  EXPECT_EQ(w.num_events(), 5u);
  const std::string path = dir.File("trace_2.json");
  ASSERT_TRUE(w.Write(path).ok());
  EXPECT_FALSE(std::ifstream(path + ".tmp").good()) << "temporary file left behind";

  const json::Json trace = ReadJson(path);
  ASSERT_TRUE(trace.is_object());
  EXPECT_EQ(Str(trace, "displayTimeUnit"), "ms");
  ASSERT_NE(Find(trace, "otherData"), nullptr);
  EXPECT_EQ(Int(*Find(trace, "otherData"), "rank"), 2);
  EXPECT_EQ(Int(*Find(trace, "otherData"), "dropped_events"), 0);
  const json::Json* events = Find(trace, "traceEvents");
  ASSERT_TRUE(events != nullptr && events->is_array());

  // Metadata: the process is "rank 2", the four tracks are named.
  auto process = Named(trace, "process_name");
  ASSERT_EQ(process.size(), 1u);
  EXPECT_EQ(Str(*process[0], "ph"), "M");
  EXPECT_EQ(Int(*process[0], "pid"), 2);
  EXPECT_EQ(Str(*Find(*process[0], "args"), "name"), "rank 2");
  std::map<int64_t, std::string> threads;
  for (const json::Json* e : Named(trace, "thread_name")) threads[Int(*e, "tid")] = Str(*Find(*e, "args"), "name");
  EXPECT_EQ(threads, (std::map<int64_t, std::string>{{1, "main"}, {2, "autograd"}, {3, "comm"}, {4, "control"}}));

  auto fwd = Named(trace, "forward");
  ASSERT_EQ(fwd.size(), 1u);
  EXPECT_EQ(Str(*fwd[0], "ph"), "X");
  EXPECT_EQ(Str(*fwd[0], "cat"), "main");
  EXPECT_EQ(Int(*fwd[0], "pid"), 2);
  EXPECT_EQ(Int(*fwd[0], "tid"), TraceWriter::kMain);
  EXPECT_EQ(Int(*fwd[0], "dur"), 5000);
  EXPECT_GE(Int(*fwd[0], "ts"), 0);
  ASSERT_NE(Find(*fwd[0], "args"), nullptr);
  EXPECT_EQ(Str(*Find(*fwd[0], "args"), "step"), "3");

  auto launch = Named(trace, "launch bucket 0");
  ASSERT_EQ(launch.size(), 1u);
  EXPECT_EQ(Str(*launch[0], "ph"), "i");
  EXPECT_EQ(Str(*launch[0], "s"), "t");
  EXPECT_EQ(Find(*launch[0], "dur"), nullptr);
  EXPECT_EQ(Int(*launch[0], "ts"), Int(*fwd[0], "ts") + 100);

  auto reduce = Named(trace, "allreduce bucket 0");
  ASSERT_EQ(reduce.size(), 1u);
  EXPECT_EQ(Int(*reduce[0], "tid"), TraceWriter::kComm);
  EXPECT_EQ(Int(*reduce[0], "dur"), 800);

  EXPECT_EQ(Named(trace, "quote \" and \\ and \n").size(), 1u);
  auto opt = Named(trace, "optimizer");
  ASSERT_EQ(opt.size(), 1u);
  EXPECT_EQ(Str(*opt[0], "ph"), "X");
  EXPECT_GE(Int(*opt[0], "dur"), 0);
}

TEST(TraceWriter, DisabledWriterRecordsNothing) {
  TraceWriter w(false, 0);
  const auto t0 = w.Now();
  w.Complete("forward", "main", TraceWriter::kMain, t0, t0);
  w.Instant("mark", "main", TraceWriter::kMain, t0);
  { TraceWriter::Scope scope(&w, "optimizer", "main"); }
  { TraceWriter::Scope scope(nullptr, "no writer", "main"); }
  EXPECT_FALSE(w.enabled());
  EXPECT_EQ(w.num_events(), 0u);
}

TEST(TraceWriter, EventsBeyondTheCapAreCountedAsDropped) {
  test_support::TempDir dir("psync_runtime_trace");
  TraceWriter w(true, 0, /*max_events=*/2);
  const auto t0 = w.Now();
  for (int i = 0; i < 5; ++i) w.Instant("mark " + std::to_string(i), "main", TraceWriter::kMain, t0);
  EXPECT_EQ(w.num_events(), 2u);
  const std::string path = dir.File("trace.json");
  ASSERT_TRUE(w.Write(path).ok());
  const json::Json trace = ReadJson(path);
  ASSERT_NE(Find(trace, "otherData"), nullptr);
  EXPECT_EQ(Int(*Find(trace, "otherData"), "dropped_events"), 3);
  EXPECT_EQ(Named(trace, "mark 0").size(), 1u);
  EXPECT_EQ(Named(trace, "mark 1").size(), 1u);
  EXPECT_EQ(Named(trace, "mark 2").size(), 0u);
}

TEST(TraceWriter, ConcurrentWritersKeepEveryEvent) {
  test_support::TempDir dir("psync_runtime_trace");
  TraceWriter w(true, 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&w, t] {
      for (int i = 0; i < 250; ++i) TraceWriter::Scope s(&w, "t" + std::to_string(t), "main", TraceWriter::kAutograd);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(w.num_events(), 1000u);
  const std::string path = dir.File("trace.json");
  ASSERT_TRUE(w.Write(path).ok());
  const json::Json trace = ReadJson(path);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(Named(trace, "t" + std::to_string(t)).size(), 250u);
}

TEST(TraceWriter, UnwritablePathNamesTheFlag) {
  TraceWriter w(true, 0);
  absl::Status st = w.Write("/nonexistent-dir-psync/trace.json");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--trace"), absl::string_view::npos) << st;
}

}  // namespace
}  // namespace psync::runtime
