// Loading and validating --data and --init (worker/runtime/dataset.h): every
// error is InvalidArgument naming the file and the tensor.
#include "worker/runtime/dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"

namespace psync::runtime {
namespace {

using test_support::TempDir;

std::vector<float> Iota(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

Tensor T(const std::vector<float>& v, const Shape& shape) { return Tensor::FromVector(v, shape); }

class DatasetFiles : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const NamedTensors& tensors) {
    const std::string path = dir_.File(name);
    absl::Status st = WriteSafetensors(path, tensors);
    EXPECT_TRUE(st.ok()) << st;
    return path;
  }
  // The load must fail with InvalidArgument naming `path` and all `needles`.
  void ExpectDataError(const std::string& path, int64_t in, int64_t out, const std::vector<std::string>& needles) {
    absl::StatusOr<Dataset> d = LoadDataset(path, in, out);
    ASSERT_FALSE(d.ok()) << path;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << d.status();
    const std::string msg(d.status().message());
    EXPECT_NE(msg.find("--data " + path), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
  void ExpectInitError(const std::string& path, const std::vector<int64_t>& widths,
                       const std::vector<std::string>& needles) {
    absl::StatusOr<NamedTensors> t = LoadInit(path, widths);
    ASSERT_FALSE(t.ok()) << path;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
    const std::string msg(t.status().message());
    EXPECT_NE(msg.find("--init " + path), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }

  TempDir dir_{"psync_runtime_dataset"};
};

TEST_F(DatasetFiles, LoadsXAndY) {
  const std::string path = Write("ok.safetensors", {{"x", T(Iota(6, 0), {3, 2})}, {"y", T(Iota(3, 100), {3, 1})}});
  absl::StatusOr<Dataset> d = LoadDataset(path, 2, 1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rows, 3);
  EXPECT_EQ(d->in, 2);
  EXPECT_EQ(d->out, 1);
  EXPECT_EQ(d->x, Iota(6, 0));
  EXPECT_EQ(d->y, Iota(3, 100));
  EXPECT_EQ(d->source, path);

  Tensor x, y;
  GatherRows(*d, {2, 0, 2}, Device::CPU(), &x, &y);
  EXPECT_EQ(x.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.shape(), (Shape{3, 1}));
  EXPECT_EQ(x.ToVector(), (std::vector<float>{4, 5, 0, 1, 4, 5}));
  EXPECT_EQ(y.ToVector(), (std::vector<float>{102, 100, 102}));
}

TEST_F(DatasetFiles, WidthMismatchNamesFileTensorAndWidth) {
  const std::string path = Write("w.safetensors", {{"x", T(Iota(6, 0), {3, 2})}, {"y", T(Iota(6, 0), {3, 2})}});
  ExpectDataError(path, 4, 2, {"tensor 'x'", "[3, 2]", "[N, 4]", "first of --widths"});
  ExpectDataError(path, 2, 3, {"tensor 'y'", "[3, 2]", "[N, 3]", "last of --widths"});
}

TEST_F(DatasetFiles, WrongRankOfTensorIsAWidthMismatch) {
  const std::string path = Write("r.safetensors", {{"x", T(Iota(6, 0), {6})}, {"y", T(Iota(3, 0), {3, 1})}});
  ExpectDataError(path, 2, 1, {"tensor 'x'", "[N, 2]"});
}

TEST_F(DatasetFiles, MissingOrExtraTensorsAreNamed) {
  const std::string no_y = Write("no_y.safetensors", {{"x", T(Iota(4, 0), {2, 2})}});
  ExpectDataError(no_y, 2, 1, {"no tensor 'y'"});
  const std::string no_x = Write("no_x.safetensors", {{"y", T(Iota(2, 0), {2, 1})}});
  ExpectDataError(no_x, 2, 1, {"no tensor 'x'"});
  const std::string extra = Write("extra.safetensors", {{"x", T(Iota(4, 0), {2, 2})}, {"y", T(Iota(2, 0), {2, 1})},
                                                        {"labels", T(Iota(2, 0), {2})}});
  ExpectDataError(extra, 2, 1, {"labels"});
}

TEST_F(DatasetFiles, RowCountMismatchAndNonFiniteValues) {
  const std::string rows = Write("rows.safetensors", {{"x", T(Iota(6, 0), {3, 2})}, {"y", T(Iota(2, 0), {2, 1})}});
  ExpectDataError(rows, 2, 1, {"'x' [3, 2]", "'y' [2, 1]", "different row counts"});
  std::vector<float> xv = Iota(4, 0);
  xv[3] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan = Write("nan.safetensors", {{"x", T(xv, {2, 2})}, {"y", T(Iota(2, 0), {2, 1})}});
  ExpectDataError(nan, 2, 1, {"tensor 'x'", "non-finite"});
  std::vector<float> yv = {1, std::numeric_limits<float>::infinity()};
  const std::string inf = Write("inf.safetensors", {{"x", T(Iota(4, 0), {2, 2})}, {"y", T(yv, {2, 1})}});
  ExpectDataError(inf, 2, 1, {"tensor 'y'", "non-finite"});
}

TEST_F(DatasetFiles, UnreadableFileNamesTheFlag) {
  const std::string path = dir_.File("does_not_exist.safetensors");
  absl::StatusOr<Dataset> d = LoadDataset(path, 2, 1);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("--data"), absl::string_view::npos) << d.status();
  EXPECT_NE(d.status().message().find("does_not_exist.safetensors"), absl::string_view::npos) << d.status();
}

TEST_F(DatasetFiles, InitLoadsInRegistrationOrder) {
  const std::vector<int64_t> widths = {3, 2, 1};
  // Written in a different order than the MLP registers its parameters.
  const std::string path = Write("init.safetensors", {{"layers.1.bias", T({9}, {1})},
                                                      {"layers.0.weight", T(Iota(6, 0), {2, 3})},
                                                      {"layers.1.weight", T({7, 8}, {1, 2})},
                                                      {"layers.0.bias", T({-1, -2}, {2})}});
  absl::StatusOr<NamedTensors> init = LoadInit(path, widths);
  ASSERT_TRUE(init.ok()) << init.status();
  ASSERT_EQ(init->size(), 4u);
  EXPECT_EQ((*init)[0].first, "layers.0.weight");
  EXPECT_EQ((*init)[0].second.ToVector(), Iota(6, 0));
  EXPECT_EQ((*init)[1].first, "layers.0.bias");
  EXPECT_EQ((*init)[1].second.ToVector(), (std::vector<float>{-1, -2}));
  EXPECT_EQ((*init)[2].first, "layers.1.weight");
  EXPECT_EQ((*init)[3].first, "layers.1.bias");
  EXPECT_EQ(MlpParamNames(widths),
            (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"}));
  EXPECT_EQ(MlpParamShapes(widths), (std::vector<Shape>{{2, 3}, {2}, {1, 2}, {1}}));
}

TEST_F(DatasetFiles, InitErrorsNameFileAndTensor) {
  const std::vector<int64_t> widths = {3, 2, 1};
  const NamedTensors good = {{"layers.0.weight", T(Iota(6, 0), {2, 3})},
                             {"layers.0.bias", T({0, 0}, {2})},
                             {"layers.1.weight", T({0, 0}, {1, 2})},
                             {"layers.1.bias", T({0}, {1})}};
  NamedTensors shape = good;
  shape[0].second = T(Iota(6, 0), {3, 2});
  ExpectInitError(Write("shape.safetensors", shape), widths, {"'layers.0.weight'", "[3, 2]", "[2, 3]"});
  NamedTensors missing(good.begin(), good.end() - 1);
  ExpectInitError(Write("missing.safetensors", missing), widths, {"missing tensor 'layers.1.bias'"});
  NamedTensors extra = good;
  extra.emplace_back("layers.2.weight", T({0}, {1, 1}));
  ExpectInitError(Write("extra.safetensors", extra), widths, {"unexpected tensor 'layers.2.weight'"});
  NamedTensors nan = good;
  nan[2].second = T({0, std::nanf("")}, {1, 2});
  ExpectInitError(Write("nan.safetensors", nan), widths, {"'layers.1.weight'", "non-finite"});
}

TEST(SyntheticDataset, SameSeedSameDataDifferentSeedDifferentData) {
  const Dataset a = SyntheticDataset(7, 50, 4, 3);
  const Dataset b = SyntheticDataset(7, 50, 4, 3);
  const Dataset c = SyntheticDataset(8, 50, 4, 3);
  EXPECT_EQ(a.rows, 50);
  EXPECT_EQ(a.x.size(), 200u);
  EXPECT_EQ(a.y.size(), 150u);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
  EXPECT_NE(a.x, c.x);
  for (float v : a.x) {
    EXPECT_GE(v, -1.f);
    EXPECT_LE(v, 1.f);
  }
  // y = sin(.) + 0.05 noise: bounded by 1.05.
  for (float v : a.y) EXPECT_LE(std::fabs(v), 1.05f + 1e-6f);
  EXPECT_NE(a.source.find("seed=7"), std::string::npos) << a.source;
}

}  // namespace
}  // namespace psync::runtime
