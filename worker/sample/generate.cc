#include "worker/sample/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "psync/autograd/grad_mode.h"
#include "psync/tensor/ops.h"

namespace psync::sample {

int64_t DrawToken(const std::vector<float>& logits, double temperature, int64_t top_k, uint64_t* rng_state) {
  const int64_t V = static_cast<int64_t>(logits.size());
  std::vector<int64_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = (top_k <= 0 || top_k > V) ? V : top_k;
  // Ties keep the lower id first, so the candidate set is deterministic.
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  });
  // Softmax over the k candidates in double, shifted by the max for range.
  const double top = logits[static_cast<size_t>(order[0])];
  std::vector<double> p(static_cast<size_t>(k));
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    p[static_cast<size_t>(i)] = std::exp((logits[static_cast<size_t>(order[static_cast<size_t>(i)])] - top) / temperature);
    sum += p[static_cast<size_t>(i)];
  }
  // One 53-bit uniform from a splitmix64 stream: the same on every platform
  // (std::uniform_real_distribution is not specified bit for bit).
  uint64_t z = (*rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0) * sum;
  double acc = 0;
  for (int64_t i = 0; i < k; ++i) {
    acc += p[static_cast<size_t>(i)];
    if (u < acc) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(k - 1)];
}

absl::StatusOr<std::vector<int64_t>> Generate(nn::Model& model, Device device, const std::vector<int64_t>& prompt,
                                              const SampleOptions& options) {
  if (prompt.empty()) return absl::InvalidArgumentError("--prompt: must not be empty (the model needs a first token)");
  if (!(options.temperature > 0) || !std::isfinite(options.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("--temperature=", options.temperature, ": must be positive"));
  }
  if (options.block_size <= 0) return absl::InvalidArgumentError("the model's block size is unknown");
  autograd::NoGradGuard no_grad;
  std::vector<int64_t> context = prompt;
  std::vector<int64_t> out;
  uint64_t rng = options.seed;
  for (int64_t n = 0; n < options.tokens; ++n) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(context.size()), options.block_size);
    std::vector<int64_t> window(context.end() - T, context.end());
    Tensor idx = Tensor::FromVector(window, {1, T}).To(device);
    Tensor logits = model.Forward(autograd::Variable(idx)).data();  // [1, T, V]
    const int64_t V = logits.size(2);
    Tensor last = logits.Narrow(1, T - 1, 1).Contiguous().To(Device::CPU()).To(kFloat32);
    std::vector<float> row = last.ToVector();
    if (static_cast<int64_t>(row.size()) != V) return absl::InternalError("unexpected logits shape");
    if (options.vocab_limit > 0 && options.vocab_limit < V) row.resize(static_cast<size_t>(options.vocab_limit));
    const int64_t next = DrawToken(row, options.temperature, options.top_k, &rng);
    out.push_back(next);
    context.push_back(next);
  }
  return out;
}

}  // namespace psync::sample
