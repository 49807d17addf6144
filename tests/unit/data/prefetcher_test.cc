// data::Prefetcher: the steps come back in order with the batches Get gives,
// never more than one step is prepared ahead, dataset errors reach the
// training thread with their message, and stopping early never hangs.
#include "worker/data/prefetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stdexcept>

#include "tests/common/temp_dir.h"
#include "tests/unit/data/data_test_util.h"
#include "worker/data/registry.h"

namespace psync::data {
namespace {

using namespace testing;  // NOLINT
using test_support::TempDir;

constexpr auto kBound = std::chrono::seconds(30);  // generous: only a broken prefetcher waits this long

// A dataset whose batches say which (step, micro) they are, that can fail or
// throw at a step, hold a step until released, and checks the one-ahead bound:
// Get(step) may only run once the trainer has asked for step - 1.
class ScriptedDataset : public Dataset {
 public:
  std::string Describe() const override { return "scripted"; }
  const DataInfo& info() const override { return info_; }
  int64_t num_examples() const override { return 1000; }
  absl::StatusOr<Batch> Examples(int64_t, int64_t) const override { return absl::UnimplementedError("no"); }

  absl::StatusOr<Batch> Get(const BatchSpec& spec) const override {
    std::unique_lock<std::mutex> lock(mu_);
    if (spec.step > next_calls_) ahead_violation_ = true;  // Next() #c returns step c-1, then step c may be prepared
    max_step_ = std::max(max_step_, spec.step);
    cv_.notify_all();
    cv_.wait(lock, [&] { return spec.step != hold_step_ || released_; });
    if (spec.step == fail_step_ && spec.micro == 1) {
      return absl::InvalidArgumentError("--data f.bin: token count (header int32 2) is 3, expected more");
    }
    if (spec.step == throw_step_) throw std::runtime_error("allocation failed");
    Batch b;
    b.inputs = Tensor::FromVector(std::vector<int64_t>{spec.step, spec.micro, spec.rank}, {1, 3});
    b.targets = b.inputs;
    return b;
  }

  // The trainer side: call before every Next().
  void AboutToCallNext() {
    std::lock_guard<std::mutex> lock(mu_);
    ++next_calls_;
  }
  // Blocks until Get(step) has started.
  bool WaitForStep(int64_t step) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kBound, [&] { return max_step_ >= step; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool ahead_violation() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ahead_violation_;
  }

  int64_t fail_step_ = -1, throw_step_ = -1, hold_step_ = -1;

 private:
  DataInfo info_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int64_t max_step_ = -1;
  mutable bool ahead_violation_ = false;
  int64_t next_calls_ = 0;
  bool released_ = false;
};

Prefetcher::Options Opts(int64_t accumulate, int64_t first, int64_t end, int rank = 0, int world = 1) {
  Prefetcher::Options o;
  o.rank = rank;
  o.world_size = world;
  o.accumulate = accumulate;
  o.global_batch = 8;
  o.first_step = first;
  o.end_step = end;
  return o;
}

TEST(Prefetcher, StepsInOrderWithTheDatasetsBatches) {
  TempDir dir("psync_data_prefetch");
  const std::string path = dir.File("t.bin");
  Reference({"llmc", path, "500", "3"});
  DataOptions o;
  o.path = path;
  o.block_size = 16;
  absl::StatusOr<OpenedData> d = Open(o);
  ASSERT_TRUE(d.ok()) << d.status();
  Prefetcher p(*d->train, Opts(2, 3, 9, 1, 2));
  for (int64_t step = 3; step < 9; ++step) {
    absl::StatusOr<StepBatches> sb = p.Next();
    ASSERT_TRUE(sb.ok()) << sb.status();
    EXPECT_EQ(sb->step, step);
    ASSERT_EQ(sb->micro.size(), 2u);
    for (int64_t m = 0; m < 2; ++m) {
      absl::StatusOr<Batch> direct = d->train->Get(Spec(step, 1, 2, m, 2, 8));
      ASSERT_TRUE(direct.ok());
      EXPECT_EQ(sb->micro[m].inputs.ToVector<int64_t>(), direct->inputs.ToVector<int64_t>());
      EXPECT_EQ(sb->micro[m].targets.ToVector<int64_t>(), direct->targets.ToVector<int64_t>());
    }
  }
  ExpectError(p.Next().status(), absl::StatusCode::kOutOfRange, {"no step after 8"});
}

TEST(Prefetcher, PreparesAtMostOneStepAhead) {
  ScriptedDataset data;
  Prefetcher p(data, Opts(3, 0, -1));
  // Many steps: each one gives a prefetcher that runs further ahead another
  // chance to be caught (the check inside Get is exact when it fires).
  for (int64_t step = 0; step < 500; ++step) {
    data.AboutToCallNext();
    absl::StatusOr<StepBatches> sb = p.Next();
    ASSERT_TRUE(sb.ok()) << sb.status();
    ASSERT_EQ(sb->step, step);
    ASSERT_EQ(sb->micro.size(), 3u);
    EXPECT_EQ(sb->micro[2].inputs.ToVector<int64_t>(), (std::vector<int64_t>{step, 2, 0}));
    // "Train" until the next step is being prepared: a prefetcher running
    // further ahead would call Get(step + 2) before our next Next().
    ASSERT_TRUE(data.WaitForStep(step + 1));
  }
  EXPECT_FALSE(data.ahead_violation());
}

TEST(Prefetcher, DatasetErrorReachesTheTrainerWithItsMessage) {
  ScriptedDataset data;
  data.fail_step_ = 2;
  Prefetcher p(data, Opts(2, 0, -1));
  for (int64_t step = 0; step < 2; ++step) {
    data.AboutToCallNext();
    ASSERT_TRUE(p.Next().ok());
  }
  for (int i = 0; i < 2; ++i) {  // sticky
    data.AboutToCallNext();
    ExpectError(p.Next().status(), absl::StatusCode::kInvalidArgument,
                {"data for step 2 micro-batch 1", "--data f.bin: token count (header int32 2) is 3"});
  }
}

TEST(Prefetcher, ExceptionInGetBecomesAnError) {
  ScriptedDataset data;
  data.throw_step_ = 0;
  Prefetcher p(data, Opts(1, 0, -1));
  ExpectError(p.Next().status(), absl::StatusCode::kInternal, {"data for step 0 micro-batch 0", "allocation failed"});
}

TEST(Prefetcher, GeometryErrorFromARealDataset) {
  DataOptions o;
  o.rows_in = 2;
  o.rows_out = 1;
  absl::StatusOr<OpenedData> d = Open(o);
  ASSERT_TRUE(d.ok()) << d.status();
  Prefetcher::Options opt = Opts(3, 0, 10);  // B = 8 is not a multiple of W*M = 3
  Prefetcher p(*d->train, opt);
  ExpectError(p.Next().status(), absl::StatusCode::kInvalidArgument,
              {"global batch (B) is 8", "multiple of world size x accumulate"});
}

// The trainer stops early: with a prepared step nobody takes, and with a Get
// still running. Neither may hang; Next() after Stop() is Cancelled.
TEST(Prefetcher, StopsEarlyWithoutHanging) {
  {
    ScriptedDataset data;
    Prefetcher p(data, Opts(1, 0, -1));
    data.AboutToCallNext();
    ASSERT_TRUE(p.Next().ok());
    ASSERT_TRUE(data.WaitForStep(1));  // step 1 prepared (or being prepared), step 2 waits for the slot
  }                                    // destructor: joins
  ScriptedDataset data;
  data.hold_step_ = 1;
  auto p = std::make_unique<Prefetcher>(data, Opts(1, 0, -1));
  data.AboutToCallNext();
  ASSERT_TRUE(p->Next().ok());
  ASSERT_TRUE(data.WaitForStep(1));  // Get(step 1) is blocked inside the dataset
  std::future<void> stopped = std::async(std::launch::async, [&] { p->Stop(); });
  data.Release();  // the Get in progress finishes; the prefetcher must not publish or go on
  ASSERT_EQ(stopped.wait_for(kBound), std::future_status::ready);
  ExpectError(p->Next().status(), absl::StatusCode::kCancelled, {"stopped"});
  p.reset();
}

}  // namespace
}  // namespace psync::data
