#include "worker/tensor/cpu/blas_core.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include <cblas.h>

namespace psync::ops {
namespace {

// OpenBLAS x86-64 core names by the widest vector kernels they use:
// 0 SSE only, 1 AVX, 2 AVX2 + FMA, 3 AVX-512.
int CoreLevel(const std::string& name) {
  static const std::map<std::string, int> kLevels = {
      {"prescott", 0},    {"core2", 0},       {"penryn", 0},         {"dunnington", 0}, {"nehalem", 0},
      {"atom", 0},        {"opteron", 0},     {"opteron_sse3", 0},   {"barcelona", 0},  {"bobcat", 0},
      {"nano", 0},        {"sandybridge", 1}, {"bulldozer", 1},      {"piledriver", 1}, {"steamroller", 1},
      {"excavator", 1},   {"haswell", 2},     {"zen", 2},            {"skylakex", 3},   {"cooperlake", 3},
      {"sapphirerapids", 3}};
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  auto it = kLevels.find(lower);
  return it == kLevels.end() ? -1 : it->second;
}

}  // namespace

CpuFeatures HostCpuFeatures() {
  CpuFeatures f;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  f.avx = __builtin_cpu_supports("avx");
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
#endif
  return f;
}

std::string OpenBlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? std::string() : std::string(name);
}

std::optional<std::string> BetterOpenBlasCore(const std::string& detected, const CpuFeatures& features) {
  const int have = CoreLevel(detected);
  if (have < 0) return std::nullopt;
  int want = 0;
  std::string core;
  if (features.avx512) {
    want = 3;
    core = "SkylakeX";  // (Cooperlake has the same sgemm, and Debian 12's OpenBLAS warns "Core not found" for it)
  } else if (features.avx2_fma) {
    want = 2;
    core = "Haswell";
  } else if (features.avx) {
    want = 1;
    core = "Sandybridge";
  }
  if (want <= have) return std::nullopt;
  return core;
}

void ReexecForBetterOpenBlasCore(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice, or our own re-exec
  const std::optional<std::string> core = BetterOpenBlasCore(OpenBlasCoreName(), HostCpuFeatures());
  if (!core) return;
  setenv("OPENBLAS_CORETYPE", core->c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc?): go on with the kernels already loaded.
}

}  // namespace psync::ops
