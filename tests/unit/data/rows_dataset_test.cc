// The rows formats (data/rows_dataset.h) and the example order
// (data/example_order.h): today's values and contract, shuffling, the
// held-out tail, batch geometry errors.
#include "worker/data/rows_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "tests/common/temp_dir.h"
#include "tests/unit/data/data_test_util.h"
#include "worker/data/example_order.h"
#include "worker/data/registry.h"
#include "worker/safetensors/safetensors.h"

namespace psync::data {
namespace {

using namespace testing;  // NOLINT
using test_support::TempDir;

uint64_t Fnv(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

DataOptions Synthetic(int64_t rows, int64_t in, int64_t out) {
  DataOptions o;
  o.synthetic_rows = rows;
  o.rows_in = in;
  o.rows_out = out;
  return o;
}

std::unique_ptr<Dataset> OpenTrain(const DataOptions& o) {
  absl::StatusOr<OpenedData> d = Open(o);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(d->train) : nullptr;
}

// Bits of the synthetic set as psync-worker generated it before worker/data
// existed (commit 7048295, worker/runtime/dataset.cc): the values must not change.
TEST(SyntheticRows, SameValuesAsBefore) {
  RowsTable a = SyntheticRowsTable(0, 1024, 32, 16);
  EXPECT_EQ(Fnv(a.x), 0x9e4ded89c81c0b13ull);
  EXPECT_EQ(Fnv(a.y), 0xe7b28dfe27a9bbfaull);
  EXPECT_EQ(a.x[0], 0.330013871f);
  EXPECT_EQ(a.y[0], 0.391059965f);
  EXPECT_EQ(a.source, "synthetic(seed=0, rows=1024)");
  RowsTable b = SyntheticRowsTable(7, 100, 3, 2);
  EXPECT_EQ(Fnv(b.x), 0x7117ecf8cf8d213cull);
  EXPECT_EQ(Fnv(b.y), 0x2647f65144fe3c6aull);
}

// Unshuffled rows keep today's contract: step s, slot k holds row (s*B + k) mod N.
TEST(RowsDataset, TodaysContractAcrossRanksAndMicroBatches) {
  std::unique_ptr<Dataset> d = OpenTrain(Synthetic(37, 3, 2));
  ASSERT_NE(d, nullptr);
  RowsTable table = SyntheticRowsTable(0, 37, 3, 2);
  const int64_t B = 8;
  for (int64_t step : {0, 1, 4, 5, 123456789}) {
    std::vector<float> want_x, want_y;
    for (int64_t k = 0; k < B; ++k) {
      const int64_t row = (step * B + k) % 37;
      want_x.insert(want_x.end(), &table.x[row * 3], &table.x[row * 3 + 3]);
      want_y.insert(want_y.end(), &table.y[row * 2], &table.y[row * 2 + 2]);
    }
    for (int world : {1, 2, 4}) {
      for (int64_t m : {1, 2}) {
        std::vector<float> x, y;
        ConcatRanks(*d, step, world, m, B, &x, &y);
        EXPECT_EQ(x, want_x) << "step " << step << " W=" << world << " M=" << m;
        EXPECT_EQ(y, want_y) << "step " << step << " W=" << world << " M=" << m;
      }
    }
  }
  absl::StatusOr<Batch> b = d->Get(Spec(0, 0, 1, 0, 1, B));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->inputs.shape(), (Shape{B, 3}));
  EXPECT_EQ(b->targets.shape(), (Shape{B, 2}));
  EXPECT_EQ(b->inputs.dtype(), kFloat32);
  EXPECT_EQ(d->info().task, Task::kRegression);
  EXPECT_EQ(d->info().example_shape, (Shape{3}));
  EXPECT_EQ(d->info().num_outputs, 2);
  EXPECT_EQ(d->Describe(), "synthetic(seed=0, rows=37) (37 rows, in=3, out=2)");
}

TEST(RowsDataset, LoadsSafetensorsXAndY) {
  TempDir dir("psync_data_rows");
  const std::string path = dir.File("rows.safetensors");
  std::vector<float> x = {0, 1, 2, 3, 4, 5}, y = {10, 11, 12};
  ASSERT_TRUE(
      safetensors::Write(path, {{"x", Tensor::FromVector(x, {3, 2})}, {"y", Tensor::FromVector(y, {3, 1})}}).ok());
  DataOptions o;
  o.path = path;
  std::unique_ptr<Dataset> d = OpenTrain(o);  // auto: .safetensors, widths from the file
  ASSERT_NE(d, nullptr);
  absl::StatusOr<Batch> b = d->Examples(1, 2);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->inputs.ToVector(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(b->targets.ToVector(), (std::vector<float>{11, 12}));
  ExpectError(d->Examples(2, 2).status(), absl::StatusCode::kInvalidArgument, {"examples [2, 4)", "3 examples"});

  o.rows_in = 4;
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument,
              {"--data " + path, "tensor 'x'", "[3, 2]", "[N, 4]", "first of --widths"});
  ASSERT_TRUE(safetensors::Write(path, {{"x", Tensor::FromVector(std::vector<double>{1, 2}, {1, 2})},
                                      {"y", Tensor::FromVector(y, {3, 1})}})
                  .ok());
  o.rows_in = 0;
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument, {"tensor 'x'", "float64", "expected float32"});
}

TEST(ExampleOrder, PermutationMatchesPythonReference) {
  for (auto [n, seed, epoch] :
       std::vector<std::tuple<int64_t, uint64_t, uint64_t>>{{10, 0, 0}, {37, 5, 3}, {1000, 123, 9}}) {
    std::vector<int64_t> want =
        Numbers<int64_t>(Reference({"perm", std::to_string(n), std::to_string(seed), std::to_string(epoch)}));
    EXPECT_EQ(ExampleOrder::Permutation(n, seed, epoch), want) << n << " " << seed << " " << epoch;
  }
}

// --shuffle: every epoch visits every row once, epochs differ, and the ranks'
// micro-batches laid end to end equal the 1-process batch (also across an
// epoch boundary: B does not divide N).
TEST(RowsDataset, ShuffleIsAPermutationPerEpochAndEqualAcrossRanks) {
  DataOptions o = Synthetic(30, 2, 1);
  o.shuffle = true;
  o.seed = 11;
  std::unique_ptr<Dataset> d = OpenTrain(o);
  ASSERT_NE(d, nullptr);
  RowsTable table = SyntheticRowsTable(11, 30, 2, 1);
  auto row_of = [&](float x0) {
    for (int64_t r = 0; r < 30; ++r) {
      if (table.x[r * 2] == x0) return r;
    }
    return int64_t{-1};
  };
  const int64_t B = 12;  // 5 steps = 60 examples = 2 epochs; step 2 straddles the boundary
  std::vector<int64_t> order;
  for (int64_t step = 0; step < 5; ++step) {
    std::vector<float> one_x, one_y;
    ConcatRanks(*d, step, 1, 1, B, &one_x, &one_y);
    for (int world : {2, 4}) {
      for (int64_t m : {1, 3}) {
        std::vector<float> x, y;
        ConcatRanks(*d, step, world, m, B, &x, &y);
        EXPECT_EQ(x, one_x) << "step " << step << " W=" << world << " M=" << m;
        EXPECT_EQ(y, one_y);
      }
    }
    for (size_t i = 0; i < one_x.size(); i += 2) order.push_back(row_of(one_x[i]));
  }
  std::vector<int64_t> e0(order.begin(), order.begin() + 30), e1(order.begin() + 30, order.end());
  EXPECT_EQ(e0, ExampleOrder::Permutation(30, 11, 0));
  EXPECT_EQ(e1, ExampleOrder::Permutation(30, 11, 1));
  EXPECT_NE(e0, e1);
  std::sort(e0.begin(), e0.end());
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(e0[i], i);
  EXPECT_NE(ExampleOrder::Permutation(30, 12, 0), ExampleOrder::Permutation(30, 11, 0));
}

TEST(RowsDataset, ValFractionHoldsOutTheLastRows) {
  DataOptions o = Synthetic(10, 2, 1);
  o.val_fraction = 0.25;  // floor(2.5) = 2 rows held out
  absl::StatusOr<OpenedData> d = Open(o);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_NE(d->val, nullptr);
  EXPECT_EQ(d->train->num_examples(), 8);
  EXPECT_EQ(d->val->num_examples(), 2);
  RowsTable table = SyntheticRowsTable(0, 10, 2, 1);
  absl::StatusOr<Batch> v = d->val->Examples(0, 2);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->inputs.ToVector(), std::vector<float>(table.x.begin() + 16, table.x.end()));
  // Training wraps within its 8 rows: step 1 of B=6 holds rows 6, 7, 0, 1, 2, 3.
  absl::StatusOr<Batch> t = d->train->Get(Spec(1, 0, 1, 0, 1, 6));
  ASSERT_TRUE(t.ok());
  std::vector<float> want;
  for (int64_t r : {6, 7, 0, 1, 2, 3}) want.insert(want.end(), &table.x[r * 2], &table.x[r * 2 + 2]);
  EXPECT_EQ(t->inputs.ToVector(), want);
  EXPECT_NE(d->val->Describe().find("last 2 of 10 rows"), std::string::npos) << d->val->Describe();

  o.val_fraction = 0.05;
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument, {"--val-fraction=0.05", "10 rows", "holds out 0"});
  o.val_fraction = 1.5;
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument, {"--val-fraction is 1.5"});
}

TEST(RowsDataset, BadBatchSpecNamesTheField) {
  std::unique_ptr<Dataset> d = OpenTrain(Synthetic(16, 2, 1));
  ASSERT_NE(d, nullptr);
  ExpectError(d->Get(Spec(0, 0, 3, 0, 2, 8)).status(), absl::StatusCode::kInvalidArgument,
              {"global batch (B) is 8", "multiple of world size x accumulate = 3 x 2 = 6"});
  ExpectError(d->Get(Spec(0, 2, 2, 0, 1, 8)).status(), absl::StatusCode::kInvalidArgument, {"rank is 2", "0..1"});
  ExpectError(d->Get(Spec(0, 0, 1, 2, 2, 8)).status(), absl::StatusCode::kInvalidArgument,
              {"micro-batch index is 2", "0..1"});
  ExpectError(d->Get(Spec(-1, 0, 1, 0, 1, 8)).status(), absl::StatusCode::kInvalidArgument, {"step is -1"});
}

TEST(SyntheticRows, NeedsWidthsAndNoFile) {
  DataOptions o = Synthetic(16, 0, 1);
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument, {"in=0", "first and last of --widths"});
  o = Synthetic(16, 2, 1);
  o.format = "synthetic";
  o.path = "/x.safetensors";
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument,
              {"--data-format=synthetic", "--data=/x.safetensors"});
}

}  // namespace
}  // namespace psync::data
