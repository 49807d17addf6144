#include "worker/runtime/dataset.h"

#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/nn/init.h"

namespace psync::runtime {

namespace {

using Rng = nn::SplitMix64;  // fully specified: same numbers everywhere

uint64_t Mix(uint64_t seed, uint64_t stream) { return seed * 0x2545F4914F6CDD1Dull + stream * 0x9E3779B97F4A7C15ull + 1; }

}  // namespace

absl::StatusOr<Dataset> LoadDataset(const std::string& path, int64_t in, int64_t out) {
  absl::StatusOr<NamedTensors> read = ReadSafetensors(path);
  if (!read.ok()) {
    return absl::Status(read.status().code(), absl::StrCat("--data: ", std::string(read.status().message())));
  }
  const Tensor* x = nullptr;
  const Tensor* y = nullptr;
  std::vector<std::string> others;
  for (const auto& [name, t] : *read) {
    if (name == "x") x = &t;
    else if (name == "y") y = &t;
    else others.push_back(name);
  }
  auto err = [&](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat("--data ", path, ": ", msg));
  };
  if (x == nullptr) return err("has no tensor 'x' (expected x [N,in] and y [N,out])");
  if (y == nullptr) return err("has no tensor 'y' (expected x [N,in] and y [N,out])");
  if (!others.empty()) return err(absl::StrCat("unexpected tensor(s) ", absl::StrJoin(others, ", "), " (expected x and y)"));
  if (x->dim() != 2 || x->size(1) != in) {
    return err(absl::StrCat("tensor 'x' has shape ", ShapeToString(x->shape()), ", expected [N, ", in,
                            "] (the first of --widths)"));
  }
  if (y->dim() != 2 || y->size(1) != out) {
    return err(absl::StrCat("tensor 'y' has shape ", ShapeToString(y->shape()), ", expected [N, ", out,
                            "] (the last of --widths)"));
  }
  if (x->size(0) != y->size(0)) {
    return err(absl::StrCat("tensors 'x' ", ShapeToString(x->shape()), " and 'y' ", ShapeToString(y->shape()),
                            " have different row counts"));
  }
  if (x->size(0) == 0) return err("has no rows");
  Dataset d;
  d.rows = x->size(0);
  d.in = in;
  d.out = out;
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

Dataset SyntheticDataset(uint64_t seed, int64_t rows, int64_t in, int64_t out) {
  // y = sin(x @ T^T) + 0.05 * noise, x ~ U(-1, 1), teacher T ~ U(-2/sqrt(in), 2/sqrt(in)).
  Dataset d;
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

void GatherRows(const Dataset& d, const std::vector<int64_t>& rows, Device device, Tensor* x, Tensor* y) {
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<float> hx(static_cast<size_t>(n * d.in)), hy(static_cast<size_t>(n * d.out));
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&hx[i * d.in], &d.x[rows[i] * d.in], sizeof(float) * d.in);
    std::memcpy(&hy[i * d.out], &d.y[rows[i] * d.out], sizeof(float) * d.out);
  }
  *x = Tensor::FromVector(hx, {n, d.in}, device);
  *y = Tensor::FromVector(hy, {n, d.out}, device);
}

std::vector<std::string> MlpParamNames(const std::vector<int64_t>& widths) {
  std::vector<std::string> names;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    names.push_back(absl::StrCat("layers.", i, ".weight"));
    names.push_back(absl::StrCat("layers.", i, ".bias"));
  }
  return names;
}

std::vector<Shape> MlpParamShapes(const std::vector<int64_t>& widths) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    shapes.push_back({widths[i + 1], widths[i]});
    shapes.push_back({widths[i + 1]});
  }
  return shapes;
}

absl::StatusOr<NamedTensors> LoadInit(const std::string& path, const std::vector<int64_t>& widths) {
  absl::StatusOr<NamedTensors> read = ReadSafetensors(path);
  if (!read.ok()) {
    return absl::Status(read.status().code(), absl::StrCat("--init: ", std::string(read.status().message())));
  }
  std::map<std::string, Tensor> by_name;
  for (auto& [name, t] : *read) by_name[name] = t;
  const std::vector<std::string> names = MlpParamNames(widths);
  const std::vector<Shape> shapes = MlpParamShapes(widths);
  NamedTensors out;
  for (size_t p = 0; p < names.size(); ++p) {
    auto it = by_name.find(names[p]);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--init ", path, ": missing tensor '", names[p], "' (shape ",
                                                     ShapeToString(shapes[p]), " for --widths)"));
    }
    if (it->second.shape() != shapes[p]) {
      return absl::InvalidArgumentError(absl::StrCat("--init ", path, ": tensor '", names[p], "' has shape ",
                                                     ShapeToString(it->second.shape()), ", expected ",
                                                     ShapeToString(shapes[p]), " for --widths"));
    }
    for (float v : it->second.ToVector()) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--init ", path, ": tensor '", names[p], "' holds a non-finite value"));
      }
    }
    out.emplace_back(names[p], it->second);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--init ", path, ": unexpected tensor '", by_name.begin()->first,
                                                   "' (the MLP has ", names.size(), " parameters: layers.{i}.weight/bias)"));
  }
  return out;
}

}  // namespace psync::runtime
