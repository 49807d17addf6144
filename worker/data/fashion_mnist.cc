#include "worker/data/fashion_mnist.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace psync::data {

namespace {
constexpr char kName[] = "fashion-mnist";
}

bool IsFashionMnistName(const std::string& path) {
  return path == kName || absl::StartsWith(path, absl::StrCat(kName, ":"));
}

std::string FashionMnistDir(const std::string& path) {
  if (path.size() > sizeof(kName)) return path.substr(sizeof(kName));  // after "fashion-mnist:"
  return kFashionMnistDefaultDir;
}

std::string FashionMnistImages(const std::string& dir, bool train) {
  return absl::StrCat(dir, "/", train ? "train" : "t10k", "-images-idx3-ubyte.gz");
}

}  // namespace psync::data
