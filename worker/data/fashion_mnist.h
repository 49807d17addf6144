// The dataset name --data=fashion-mnist[:DIR]: Fashion-MNIST's IDX files as
// Debian's dataset-fashion-mnist package installs them (train: 60000
// images, t10k: 10000, 28 x 28, 10 classes). t10k is the held-out set.
#pragma once

#include <string>

namespace psync::data {

inline constexpr char kFashionMnistDefaultDir[] = "/usr/share/datasets/fashion-mnist";

// True for "fashion-mnist" and "fashion-mnist:DIR".
bool IsFashionMnistName(const std::string& path);
// DIR of "fashion-mnist:DIR", else kFashionMnistDefaultDir.
std::string FashionMnistDir(const std::string& path);
// DIR/{train,t10k}-images-idx3-ubyte.gz (the labels file follows from the name).
std::string FashionMnistImages(const std::string& dir, bool train);

}  // namespace psync::data
