#include "worker/data/idx_dataset.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "psync/common/status_macros.h"
#include "worker/data/batch_geometry.h"
#include "worker/data/data_part.h"
#include "worker/data/idx_file.h"

namespace psync::data {

namespace {

constexpr char kImagesTag[] = "images-idx3";
constexpr char kLabelsTag[] = "labels-idx1";

// `path` with `from` replaced by `to` in its file name; "" when the name has no `from`.
std::string SwapTag(const std::string& path, const std::string& from, const std::string& to) {
  const size_t slash = path.rfind('/');
  const size_t name_at = slash == std::string::npos ? 0 : slash + 1;
  const size_t at = path.find(from, name_at);
  if (at == std::string::npos) return "";
  return path.substr(0, at) + to + path.substr(at + from.size());
}

}  // namespace

absl::StatusOr<std::pair<std::string, std::string>> IdxPaths(const std::string& path, const std::string& flag) {
  std::vector<std::string> parts = absl::StrSplit(path, ',');
  if (parts.size() == 2 && !parts[0].empty() && !parts[1].empty()) return std::make_pair(parts[0], parts[1]);
  if (parts.size() == 1) {
    if (std::string labels = SwapTag(path, kImagesTag, kLabelsTag); !labels.empty())
      return std::make_pair(path, labels);
    if (std::string images = SwapTag(path, kLabelsTag, kImagesTag); !images.empty())
      return std::make_pair(images, path);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(flag, "=", path, ": expected IMAGES,LABELS or an images file whose name contains '", kImagesTag,
                   "' (its labels file is the same name with '", kLabelsTag, "')"));
}

absl::StatusOr<ImageTable> LoadIdxPair(const std::string& images_path, const std::string& labels_path, int64_t height,
                                       int64_t width, int64_t num_classes, const std::string& flag) {
  if (num_classes < 1 || num_classes > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("number of classes is ", num_classes, ", expected 1..256 (IDX labels are bytes)"));
  }
  PSYNC_ASSIGN_OR_RETURN(
      IdxArray images, ReadIdx(images_path, {3, "images", {"image count", "rows", "cols"}, {0, height, width}}, flag));
  PSYNC_ASSIGN_OR_RETURN(IdxArray labels, ReadIdx(labels_path, {1, "labels", {"label count"}, {0}}, flag));
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", labels_path, ": dimension 0 (label count) is ",
                                                   labels.dims[0], ", expected ", images.dims[0],
                                                   " (the image count of ", images_path, ")"));
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", labels_path, ": label ", i, " is ",
                                                     static_cast<int>(labels.data[i]), ", expected 0..",
                                                     num_classes - 1, " (", num_classes, " classes)"));
    }
  }
  ImageTable t;
  t.count = images.dims[0];
  t.height = images.dims[1];
  t.width = images.dims[2];
  t.num_classes = num_classes;
  t.pixels = std::move(images.data);
  t.labels = std::move(labels.data);
  t.images_path = images_path;
  t.labels_path = labels_path;
  return t;
}

ImageDataset::ImageDataset(std::shared_ptr<const ImageTable> table, int64_t begin, int64_t count, bool shuffle,
                           uint64_t seed, float mean, float std, std::string description)
    : ExampleDataset(begin, count, shuffle, seed, std::move(description),
                     DataInfo{Task::kClassification, {1, table->height, table->width}, table->num_classes, -1}),
      table_(std::move(table)) {
  // The same float32 arithmetic as torchvision's ToTensor + Normalize.
  for (int b = 0; b < 256; ++b) value_[b] = (static_cast<float>(b) / 255.0f - mean) / std;
}

Batch ImageDataset::Gather(const std::vector<int64_t>& images) const {
  const ImageTable& t = *table_;
  const int64_t n = static_cast<int64_t>(images.size());
  const int64_t pixels = t.height * t.width;
  Batch b;
  b.inputs = Tensor::Empty({n, 1, t.height, t.width}, kFloat32);
  b.targets = Tensor::Empty({n}, kInt64);
  float* x = b.inputs.data<float>();
  int64_t* y = b.targets.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t img = begin() + images[i];
    const uint8_t* src = &t.pixels[static_cast<size_t>(img * pixels)];
    float* dst = x + i * pixels;
    for (int64_t p = 0; p < pixels; ++p) dst[p] = value_[src[p]];
    y[i] = t.labels[static_cast<size_t>(img)];
  }
  return b;
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenIdx(const DataOptions& o) {
  if (o.path.empty())
    return absl::InvalidArgumentError(absl::StrCat("--data-format=idx needs ", o.flag, "=IMAGES[,LABELS]"));
  if (!(o.image_std > 0) || !std::isfinite(o.image_std) || !std::isfinite(o.image_mean)) {
    return absl::InvalidArgumentError(absl::StrCat("image normalisation mean ", o.image_mean, ", std ", o.image_std,
                                                   ": expected finite values and std > 0"));
  }
  PSYNC_ASSIGN_OR_RETURN(auto paths, IdxPaths(o.path, o.flag));
  PSYNC_ASSIGN_OR_RETURN(ImageTable table,
                         LoadIdxPair(paths.first, paths.second, o.image_height, o.image_width, o.num_classes, o.flag));
  PSYNC_ASSIGN_OR_RETURN(PartRange range, SelectPart(o, paths.first, table.count, "images"));
  std::string description = DescribeExamples(
      o, paths.first, absl::StrCat("(", table.count, " images 1x", table.height, "x", table.width, ", ",
                                   table.num_classes, " classes)"),
      range, table.count, "images");
  auto shared = std::make_shared<const ImageTable>(std::move(table));
  return std::unique_ptr<Dataset>(new ImageDataset(std::move(shared), range.begin, range.count, o.shuffle, o.seed,
                                                   o.image_mean, o.image_std, std::move(description)));
}

}  // namespace psync::data
