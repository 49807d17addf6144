// DataOptions: everything a dataset may be opened with. The worker fills the
// first block from its flags and calls Open() (data/registry.h); Open fills
// the second block for each dataset it creates.
#pragma once

#include <cstdint>
#include <string>

namespace psync::data {

// Fashion-MNIST's conventional normalisation (mean and std of the 60000
// training images' pixels scaled to [0, 1]: 0.2860406, 0.3530242), as in
// torchvision's transforms.Normalize((0.2860,), (0.3530,)).
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// Which part of the file a dataset covers (--val-fraction=F holds out the
// tail: rows/images: the last floor(F*N) examples; tokens: the last
// floor(F*N) tokens).
enum class DataPart {
  kWhole,
  kHead,  // everything but the held-out tail (training)
  kTail,  // the held-out tail (validation)
};

struct DataOptions {
  // ---- from flags
  // --data: a file; for idx "IMAGES" (its labels file is found by replacing
  // "images-idx3" with "labels-idx1" in the name) or "IMAGES,LABELS";
  // "fashion-mnist" or "fashion-mnist:DIR" (train + t10k from DIR, default
  // /usr/share/datasets/fashion-mnist); "" = the synthetic rows; tokens: a
  // directory of llm.c shards or a glob ('DIR/*_train_*.bin'), read as one
  // stream in sorted order (token_stream.h).
  std::string path;
  std::string format = "auto";    // --data-format: auto|rows|synthetic|idx|tokens|bytes
  std::string val_path;           // --val-data: same forms as --data
  double val_fraction = 0;        // --val-fraction: hold out the tail of --data (0 = none)
  int64_t block_size = 0;         // --block-size T: tokens per sequence (tokens, bytes)
  // --vocab-size (gpt; 0 = unknown). Shards (a directory or glob) then check
  // the ids they read against it instead of a pass over all of them at Open.
  int64_t vocab_size = 0;
  bool shuffle = false;           // --shuffle: a seeded permutation per epoch (rows, synthetic, idx)
  uint64_t seed = 0;              // --seed: the shuffle and the synthetic rows
  int64_t synthetic_rows = 1024;  // --synthetic-rows
  // rows/synthetic: widths of x and y (the first and last of --widths). 0 =
  // whatever the file has (synthetic needs both).
  int64_t rows_in = 0, rows_out = 0;
  int64_t num_classes = 10;  // idx: every label must be < this
  // idx: the image size the model expects (0 = whatever the file has;
  // fashion-mnist: 28 x 28).
  int64_t image_height = 0, image_width = 0;
  // idx: inputs are (pixel / 255 - mean) / std in float32.
  float image_mean = kFashionMnistMean;
  float image_std = kFashionMnistStd;

  // ---- set by Open() for each dataset it creates
  DataPart part = DataPart::kWhole;
  std::string flag = "--data";  // names the source in error messages
  std::string name;             // shown by Describe() in place of the path ("fashion-mnist train")
};

}  // namespace psync::data
