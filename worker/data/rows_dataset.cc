#include "worker/data/rows_dataset.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/status_macros.h"
#include "worker/data/batch_geometry.h"
#include "worker/data/data_part.h"
#include "psync/nn/init.h"  // SplitMix64 (header-only; psync_data does not link psync_nn)
#include "worker/safetensors/safetensors.h"

namespace psync::data {

namespace {

using Rng = nn::SplitMix64;  // fully specified: same numbers everywhere

uint64_t Mix(uint64_t seed, uint64_t stream) {
  return seed * 0x2545F4914F6CDD1Dull + stream * 0x9E3779B97F4A7C15ull + 1;
}

}  // namespace

absl::StatusOr<RowsTable> LoadRowsTable(const std::string& path, int64_t in, int64_t out, const std::string& flag) {
  absl::StatusOr<NamedTensors> read = safetensors::Read(path);
  if (!read.ok()) {
    return absl::Status(read.status().code(), absl::StrCat(flag, ": ", std::string(read.status().message())));
  }
  const Tensor* x = nullptr;
  const Tensor* y = nullptr;
  std::vector<std::string> others;
  for (const auto& [name, t] : *read) {
    if (name == "x")
      x = &t;
    else if (name == "y")
      y = &t;
    else
      others.push_back(name);
  }
  auto err = [&](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", msg));
  };
  if (x == nullptr) return err("has no tensor 'x' (expected x [N,in] and y [N,out])");
  if (y == nullptr) return err("has no tensor 'y' (expected x [N,in] and y [N,out])");
  if (!others.empty())
    return err(absl::StrCat("unexpected tensor(s) ", absl::StrJoin(others, ", "), " (expected x and y)"));
  if (x->dtype() != kFloat32) {
    return err(absl::StrCat("tensor 'x' has dtype ", DTypeName(x->dtype()), ", expected float32 (F32)"));
  }
  if (y->dtype() != kFloat32) {
    return err(absl::StrCat("tensor 'y' has dtype ", DTypeName(y->dtype()), ", expected float32 (F32)"));
  }
  if (x->dim() != 2 || (in > 0 && x->size(1) != in)) {
    return err(absl::StrCat("tensor 'x' has shape ", ShapeToString(x->shape()), ", expected [N, ",
                            in > 0 ? absl::StrCat(in) : "in", "] (the first of --widths)"));
  }
  if (y->dim() != 2 || (out > 0 && y->size(1) != out)) {
    return err(absl::StrCat("tensor 'y' has shape ", ShapeToString(y->shape()), ", expected [N, ",
                            out > 0 ? absl::StrCat(out) : "out", "] (the last of --widths)"));
  }
  if (x->size(0) != y->size(0)) {
    return err(absl::StrCat("tensors 'x' ", ShapeToString(x->shape()), " and 'y' ", ShapeToString(y->shape()),
                            " have different row counts"));
  }
  if (x->size(0) == 0) return err("has no rows");
  RowsTable d;
  d.rows = x->size(0);
  d.in = x->size(1);
  d.out = y->size(1);
  d.x = x->ToVector();
  d.y = y->ToVector();
  d.source = path;
  for (float v : d.x) {
    if (!std::isfinite(v)) return err("tensor 'x' holds a non-finite value");
  }
  for (float v : d.y) {
    if (!std::isfinite(v)) return err("tensor 'y' holds a non-finite value");
  }
  return d;
}

RowsTable SyntheticRowsTable(uint64_t seed, int64_t rows, int64_t in, int64_t out) {
  RowsTable d;
  d.rows = rows;
  d.in = in;
  d.out = out;
  d.source = absl::StrCat("synthetic(seed=", seed, ", rows=", rows, ")");
  Rng teacher_rng(Mix(seed, 101));
  std::vector<float> teacher(static_cast<size_t>(in * out));
  const float bound = 2.0f / std::sqrt(static_cast<float>(in));
  for (float& t : teacher) t = teacher_rng.Uniform(-bound, bound);
  Rng rng(Mix(seed, 102));
  d.x.resize(static_cast<size_t>(rows * in));
  d.y.resize(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = &d.x[r * in];
    for (int64_t i = 0; i < in; ++i) xr[i] = rng.Uniform(-1.f, 1.f);
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(xr[i]) * teacher[o * in + i];
      d.y[r * out + o] = static_cast<float>(std::sin(acc)) + 0.05f * rng.Uniform(-1.f, 1.f);
    }
  }
  return d;
}

RowsDataset::RowsDataset(std::shared_ptr<const RowsTable> table, int64_t begin, int64_t count, bool shuffle,
                         uint64_t seed, std::string description)
    : ExampleDataset(begin, count, shuffle, seed, std::move(description),
                     DataInfo{Task::kRegression, {table->in}, table->out, -1}),
      table_(std::move(table)) {}

Batch RowsDataset::Gather(const std::vector<int64_t>& rows) const {
  const RowsTable& d = *table_;
  const int64_t n = static_cast<int64_t>(rows.size());
  Batch b;
  b.inputs = Tensor::Empty({n, d.in}, kFloat32);
  b.targets = Tensor::Empty({n, d.out}, kFloat32);
  float* x = b.inputs.data<float>();
  float* y = b.targets.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = begin() + rows[i];
    std::memcpy(&x[i * d.in], &d.x[r * d.in], sizeof(float) * d.in);
    std::memcpy(&y[i * d.out], &d.y[r * d.out], sizeof(float) * d.out);
  }
  return b;
}

namespace {

absl::StatusOr<std::unique_ptr<Dataset>> MakeRowsDataset(const DataOptions& o, RowsTable table,
                                                         const std::string& path) {
  PSYNC_ASSIGN_OR_RETURN(PartRange range, SelectPart(o, path, table.rows, "rows"));
  std::string description =
      DescribeExamples(o, table.source, absl::StrCat("(", table.rows, " rows, in=", table.in, ", out=", table.out, ")"),
                       range, table.rows, "rows");
  auto shared = std::make_shared<const RowsTable>(std::move(table));
  return std::unique_ptr<Dataset>(
      new RowsDataset(std::move(shared), range.begin, range.count, o.shuffle, o.seed, std::move(description)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenRows(const DataOptions& o) {
  if (o.path.empty()) return absl::InvalidArgumentError(absl::StrCat("--data-format=rows needs ", o.flag, "=FILE"));
  PSYNC_ASSIGN_OR_RETURN(RowsTable table, LoadRowsTable(o.path, o.rows_in, o.rows_out, o.flag));
  return MakeRowsDataset(o, std::move(table), o.path);
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenSynthetic(const DataOptions& o) {
  if (!o.path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-format=synthetic generates its rows: ", o.flag, "=", o.path, " is not used (drop one)"));
  }
  if (o.synthetic_rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--synthetic-rows is ", o.synthetic_rows, ", expected >= 1"));
  }
  if (o.rows_in < 1 || o.rows_out < 1) {
    // Why name --data: widths of 0 mean the model takes no rows (psync-worker
    // sets them only for a rows model), and no --data fell back to here.
    return absl::InvalidArgumentError(absl::StrCat(
        "no ", o.flag, " given, and synthetic rows need their widths: in=", o.rows_in, ", out=", o.rows_out,
        ", expected both >= 1 (the first and last of --widths); a model that takes no rows (--model=gpt: tokens, "
        "--model=cnn: images) needs ", o.flag, "=FILE"));
  }
  return MakeRowsDataset(o, SyntheticRowsTable(o.seed, o.synthetic_rows, o.rows_in, o.rows_out), "synthetic");
}

}  // namespace psync::data
