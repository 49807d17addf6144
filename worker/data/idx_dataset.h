// --data-format=idx: an image classification set from an IDX pair (images
// magic 0x00000803 [N, H, W] and labels 0x00000801 [N], gzip or plain).
// Stored as read (uint8) and converted per batch:
//   inputs  float32 [b, 1, H, W] = (pixel / 255 - mean) / std  (DataOptions; Fashion-MNIST's by default)
//   targets int64 [b], each < num_classes (checked at load)
// Which images per step: example_order.h (optionally shuffled).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/data_options.h"
#include "worker/data/example_dataset.h"

namespace psync::data {

struct ImageTable {
  int64_t count = 0, height = 0, width = 0, num_classes = 0;
  std::vector<uint8_t> pixels;  // [count, height, width]
  std::vector<uint8_t> labels;  // [count]
  std::string images_path, labels_path;
};

// The images and labels files of an idx --data value: "IMAGES,LABELS", or
// IMAGES whose labels file is the same name with "images-idx3" replaced by
// "labels-idx1" (a labels file given alone finds its images the other way).
absl::StatusOr<std::pair<std::string, std::string>> IdxPaths(const std::string& path, const std::string& flag);

// Reads and validates both files (idx_file.h), then: equal counts, every
// label < num_classes; height/width > 0 must match (0: any).
absl::StatusOr<ImageTable> LoadIdxPair(const std::string& images_path, const std::string& labels_path, int64_t height,
                                       int64_t width, int64_t num_classes, const std::string& flag);

class ImageDataset final : public ExampleDataset {
 public:
  // Images [begin, begin + count) of `table`.
  ImageDataset(std::shared_ptr<const ImageTable> table, int64_t begin, int64_t count, bool shuffle, uint64_t seed,
               float mean, float std, std::string description);

 private:
  Batch Gather(const std::vector<int64_t>& images) const override;

  std::shared_ptr<const ImageTable> table_;
  std::array<float, 256> value_;  // pixel byte -> normalised float32
};

// Registry factory (data/registry.cc): --data-format=idx.
absl::StatusOr<std::unique_ptr<Dataset>> OpenIdx(const DataOptions& options);

}  // namespace psync::data
