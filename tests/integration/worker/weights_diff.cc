// weights_diff A.safetensors B.safetensors [tolerance]: prints the max
// absolute difference over tensors of the same name; exit 0 when the files
// have the same names and shapes and the difference is <= tolerance
// (default 1e-5), 1 otherwise, 2 on unreadable input.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "worker/safetensors/safetensors.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: weights_diff A B [tolerance]\n");
    return 2;
  }
  const double tol = argc > 3 ? std::atof(argv[3]) : 1e-5;
  auto a = psync::safetensors::Read(argv[1]);
  auto b = psync::safetensors::Read(argv[2]);
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "weights_diff: %s\n", std::string((!a.ok() ? a.status() : b.status()).message()).c_str());
    return 2;
  }
  std::map<std::string, psync::Tensor> bm(b->begin(), b->end());
  if (a->size() != bm.size()) {
    std::fprintf(stderr, "weights_diff: %zu vs %zu tensors\n", a->size(), bm.size());
    return 1;
  }
  double worst = 0;
  std::string where;
  for (const auto& [name, t] : *a) {
    auto it = bm.find(name);
    if (it == bm.end() || it->second.shape() != t.shape()) {
      std::fprintf(stderr, "weights_diff: tensor %s missing or of another shape in %s\n", name.c_str(), argv[2]);
      return 1;
    }
    auto va = t.ToVector(), vb = it->second.ToVector();
    for (size_t i = 0; i < va.size(); ++i) {
      double d = std::fabs(static_cast<double>(va[i]) - vb[i]);
      if (!(d <= worst)) {
        worst = d;
        where = name;
      }
    }
  }
  std::printf("max_abs_diff %.3g (%s)\n", worst, where.c_str());
  return worst <= tol ? 0 : 1;
}
