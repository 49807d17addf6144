// psync-nn-ops-bench: forward and backward time of each GPT layer op
// (Embedding, LayerNorm, GELU, causal softmax) at the GPT bench shapes and
// of each CNN layer op (the two convolutions and a max-pool of --model=cnn
// on Fashion-MNIST's 1x28x28 images), one thread, to compare with
// bench/nn_ops_torch.py (the same ops in PyTorch 1.13, the causal softmax as
// nanoGPT writes it: scale, masked_fill, softmax). bench/run_nn_ops_bench.sh
// runs both and prints a table.
//
//   psync-nn-ops-bench --batch=16 --block=64 --embd=128 --heads=4 --vocab=256 --images=64 --reps=200
//
// conv1 (1 -> 16 channels, 28x28) is the first layer: its backward computes
// the weight and bias gradients only (the images need none), as in
// training; conv2 (16 -> 32, 14x14) computes all three.
//
// Prints "RESULT impl=psync op=<op> min_us=... median_us=..." per op. Times
// are wall-clock per call; the min is the least disturbed by other load.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "worker/tensor/ops.h"
#include "worker/tensor/cpu/blas_core.h"

ABSL_FLAG(int, batch, 16, "sequences per batch (B)");
ABSL_FLAG(int, block, 64, "sequence length (T)");
ABSL_FLAG(int, embd, 128, "embedding width (C)");
ABSL_FLAG(int, heads, 4, "attention heads (H)");
ABSL_FLAG(int, vocab, 256, "vocabulary size (V)");
ABSL_FLAG(int, images, 64, "images per batch of the CNN ops");
ABSL_FLAG(int, reps, 200, "timed calls per op");

namespace {

using psync::Shape;
using psync::Tensor;
namespace ops = psync::ops;

Tensor Random(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(psync::NumelOf(shape)));
  for (float& x : v) x = dist(gen);
  return Tensor::FromVector(v, shape);
}

void Time(const std::string& op, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < 5; ++i) fn();  // warm the allocator cache and the caches
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("%-20s min %9.1f us   median %9.1f us\n", op.c_str(), us.front(), us[us.size() / 2]);
  std::printf("RESULT impl=psync op=%s min_us=%.1f median_us=%.1f\n", op.c_str(), us.front(), us[us.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  psync::ops::ReexecForBetterOpenBlasCore(argv);  // the kernels psync-worker runs with
  psync::ParseFlagsOrExit("psync-nn-ops-bench", "psync-nn-ops-bench [flags]  (GPT layer ops, forward and backward)",
                          argc, argv, psync::FlagsDefinedIn(__FILE__));
  const int64_t B = absl::GetFlag(FLAGS_batch), T = absl::GetFlag(FLAGS_block), C = absl::GetFlag(FLAGS_embd);
  const int64_t H = absl::GetFlag(FLAGS_heads), V = absl::GetFlag(FLAGS_vocab);
  const int64_t N = absl::GetFlag(FLAGS_images);
  const int reps = absl::GetFlag(FLAGS_reps);
  if (B <= 0 || T <= 0 || C <= 0 || H <= 0 || V <= 0 || N <= 0 || reps <= 0 || C % H != 0) {
    psync::ExitBadFlag("psync-nn-ops-bench",
                       "--batch, --block, --embd, --heads, --vocab, --images and --reps must be positive, --embd a "
                       "multiple of --heads");
  }
  std::printf("psync-nn-ops-bench: B=%lld T=%lld C=%lld H=%lld V=%lld images=%lld, float32, cpu, 1 thread\n",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(C),
              static_cast<long long>(H), static_cast<long long>(V), static_cast<long long>(N));

  std::mt19937 gen(1);
  std::vector<int64_t> idv(static_cast<size_t>(B * T));
  for (int64_t& v : idv) v = std::uniform_int_distribution<int64_t>(0, V - 1)(gen);
  const Tensor ids = Tensor::FromVector(idv, {B, T}), wte = Random({V, C}, 2), gx = Random({B, T, C}, 3);
  Time("embedding_fwd", reps, [&] { ops::Embedding(ids, wte); });
  Time("embedding_bwd", reps, [&] { ops::EmbeddingBackward(gx, ids, V); });

  const Tensor x = Random({B, T, C}, 4), w = Random({C}, 5), b = Random({C}, 6);
  const ops::LayerNormResult ln = ops::LayerNorm(x, w, b, 1e-5);
  Time("layernorm_fwd", reps, [&] { ops::LayerNorm(x, w, b, 1e-5); });
  Time("layernorm_bwd", reps, [&] { ops::LayerNormBackward(gx, x, w, ln.mean, ln.rstd); });

  const Tensor h = Random({B, T, 4 * C}, 7, -3.0f, 3.0f), gh = Random({B, T, 4 * C}, 8);
  Time("gelu_fwd", reps, [&] { ops::Gelu(h); });
  Time("gelu_bwd", reps, [&] { ops::GeluBackward(gh, h); });

  const Tensor s = Random({B, H, T, T}, 9, -3.0f, 3.0f), gs = Random({B, H, T, T}, 10);
  const double scale = 1.0 / std::sqrt(static_cast<double>(C / H));
  const Tensor p = ops::CausalSoftmax(s, scale);
  Time("causal_softmax_fwd", reps, [&] { ops::CausalSoftmax(s, scale); });
  Time("causal_softmax_bwd", reps, [&] { ops::CausalSoftmaxBackward(gs, p, scale); });

  // The CNN's layers at batch N.
  const Tensor x1 = Random({N, 1, 28, 28}, 11, 0.0f, 1.0f), w1 = Random({16, 1, 3, 3}, 12), b1 = Random({16}, 13);
  const Tensor g1 = Random({N, 16, 28, 28}, 14);
  Time("conv1_fwd", reps, [&] { ops::Conv2d(x1, w1, b1, 1, 1); });
  Time("conv1_bwd", reps, [&] { ops::Conv2dBackward(g1, x1, w1, 1, 1, {false, true, true}); });
  const Tensor x2 = Random({N, 16, 14, 14}, 15), w2 = Random({32, 16, 3, 3}, 16), b2 = Random({32}, 17);
  const Tensor g2 = Random({N, 32, 14, 14}, 18);
  Time("conv2_fwd", reps, [&] { ops::Conv2d(x2, w2, b2, 1, 1); });
  Time("conv2_bwd", reps, [&] { ops::Conv2dBackward(g2, x2, w2, 1, 1); });
  const Tensor a = Random({N, 16, 28, 28}, 19), ga = Random({N, 16, 14, 14}, 20);
  const ops::MaxPool2dResult pool = ops::MaxPool2d(a, 2);
  Time("maxpool_fwd", reps, [&] { ops::MaxPool2d(a, 2); });
  Time("maxpool_bwd", reps, [&] { ops::MaxPool2dBackward(ga, pool.indices, 2, a.shape()); });
  return 0;
}
