// What the trainer draws in the Chrome trace (--trace) besides its own
// spans: the reducer's bucket launches, reductions and finalize, and one
// span per AccumulateGrad node (the engine's node observer).
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "psync/autograd/engine.h"
#include "worker/ddp/reducer_trace.h"
#include "worker/runtime/trace_writer.h"

namespace psync::runtime {

// Reducer events -> trace: bucket launch (instant on main), bucket reduction
// (span on comm, launch to observed completion), finalize (span on main).
class ReducerTraceObserver : public ddp::ReducerObserver {
 public:
  explicit ReducerTraceObserver(TraceWriter* trace) : trace_(trace) {}
  void OnBucketLaunched(int64_t iteration, const ddp::BucketTrace& b) override {
    trace_->Instant(absl::StrCat("launch bucket ", b.bucket), "ddp", TraceWriter::kMain, b.launch,
                    {{"iteration", std::to_string(iteration)}, {"bytes", std::to_string(b.bytes)},
                     {"params", std::to_string(b.num_params)}});
  }
  void OnBucketCompleted(int64_t iteration, const ddp::BucketTrace& b) override {
    trace_->Complete(absl::StrCat("allreduce bucket ", b.bucket), "comm", TraceWriter::kComm, b.launch, b.complete,
                     {{"iteration", std::to_string(iteration)}, {"bytes", std::to_string(b.bytes)},
                      {"params", std::to_string(b.num_params)}});
    trace_->Instant(absl::StrCat("bucket ", b.bucket, " complete"), "ddp", TraceWriter::kMain, b.complete,
                    {{"iteration", std::to_string(iteration)}});
  }
  void OnIterationFinalized(const ddp::IterationTrace& t) override {
    if (t.finalize_begin.time_since_epoch().count() == 0) return;
    trace_->Complete("finalize", "ddp", TraceWriter::kMain, t.finalize_begin, t.finalize_end,
                     {{"iteration", std::to_string(t.iteration)}, {"synced", t.synced ? "true" : "false"},
                      {"locally_unused", std::to_string(t.locally_unused)},
                      {"globally_unused", std::to_string(t.globally_unused)},
                      {"rebuilt_buckets", t.rebuilt_buckets ? "true" : "false"}});
  }

 private:
  TraceWriter* trace_;
};

// One span per AccumulateGrad node (the engine's node observer).
class AccumulateGradTracer {
 public:
  explicit AccumulateGradTracer(TraceWriter* trace) : trace_(trace) {
    autograd::Engine::Get().SetNodeObserver([this](const autograd::Node& node, bool begin) { Observe(node, begin); });
  }
  ~AccumulateGradTracer() { autograd::Engine::Get().SetNodeObserver(nullptr); }

 private:
  void Observe(const autograd::Node& node, bool begin) {
    if (node.priority() != autograd::kAccumulateGradPriority) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (begin) {
      started_[&node] = std::chrono::steady_clock::now();
      return;
    }
    auto it = started_.find(&node);
    if (it == started_.end()) return;
    trace_->Complete(node.name(), "autograd", TraceWriter::kAutograd, it->second, std::chrono::steady_clock::now());
    started_.erase(it);
  }
  TraceWriter* trace_;
  std::mutex mu_;
  std::unordered_map<const autograd::Node*, std::chrono::steady_clock::time_point> started_;
};

}  // namespace psync::runtime
