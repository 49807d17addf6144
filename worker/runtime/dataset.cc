#include "worker/runtime/dataset.h"

#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"

namespace psync::runtime {

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
