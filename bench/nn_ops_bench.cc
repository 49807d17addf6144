// psync-nn-ops-bench: forward and backward time of each GPT layer op
// (Embedding, LayerNorm, GELU, causal softmax, and the whole causal
// attention fused vs materialized, with the memory each keeps for the
// backward and its peak) at the GPT bench shapes and
// of each CNN layer op (the two convolutions and a max-pool of --model=cnn
// on Fashion-MNIST's 1x28x28 images), one thread, to compare with
// bench/nn_ops_torch.py (the same ops in PyTorch 1.13, the causal softmax as
// nanoGPT writes it: scale, masked_fill, softmax). bench/run_nn_ops_bench.sh
// runs both and prints a table.
//
//   psync-nn-ops-bench --batch=16 --block=64 --embd=128 --heads=4 --vocab=256 --images=64 --reps=200
//   psync-nn-ops-bench --only=attention --batch=1 --block=1024 --embd=768 --heads=12 --reps=5
//            (one layer's attention at GPT-2 small's T, H and head size)
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
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "worker/tensor/cpu/blas_core.h"
#include "worker/tensor/cpu_allocator.h"
#include "psync/tensor/ops.h"

ABSL_FLAG(int, batch, 16, "sequences per batch (B)");
ABSL_FLAG(int, block, 64, "sequence length (T)");
ABSL_FLAG(int, embd, 128, "embedding width (C)");
ABSL_FLAG(int, heads, 4, "attention heads (H)");
ABSL_FLAG(int, vocab, 256, "vocabulary size (V)");
ABSL_FLAG(int, images, 64, "images per batch of the CNN ops");
ABSL_FLAG(int, reps, 200, "timed calls per op");
ABSL_FLAG(std::string, only, "", "time only the ops whose name contains this (e.g. attention)");

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

double ThreadCpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

// Wall and thread-CPU microseconds per call (the CPU time is what a loaded
// machine disturbs least: the kernels are single-threaded, OpenBLAS runs
// on the calling thread with OPENBLAS_NUM_THREADS=1).
void Time(const std::string& op, int reps, const std::function<void()>& fn) {
  if (op.find(absl::GetFlag(FLAGS_only)) == std::string::npos) return;
  for (int i = 0; i < 5; ++i) fn();  // warm the allocator cache and the caches
  std::vector<double> us, cpu;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = ThreadCpuUs();
    fn();
    cpu.push_back(ThreadCpuUs() - c0);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::sort(cpu.begin(), cpu.end());
  std::printf("%-28s min %9.1f us   median %9.1f us   cpu min %9.1f us\n", op.c_str(), us.front(), us[us.size() / 2],
              cpu.front());
  std::printf("RESULT impl=psync op=%s min_us=%.1f median_us=%.1f cpu_min_us=%.1f\n", op.c_str(), us.front(),
              us[us.size() / 2], cpu.front());
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

  // The whole causal attention of one layer from its qkv projection [B, T,
  // 3C] (head views, no copy), as the GPT runs it: materialized (scores
  // [B, H, T, T], CausalSoftmax, two batched matmuls; backward: three more
  // products and the softmax backward) against fused (flash-style).
  {
    const int64_t D = C / H;
    const Tensor qkv = Random({B, T, 3 * C}, 21), go = Random({B, H, T, D}, 22);
    auto head = [&](int64_t i) { return qkv.Narrow(2, i * C, C).Reshape({B, T, H, D}).Permute({0, 2, 1, 3}); };
    const Tensor q = head(0), k = head(1), v = head(2);
    const double sc = 1.0 / std::sqrt(static_cast<double>(D));
    Tensor probs;  // the materialized forward's saved tensor
    auto mat_fwd = [&] {
      probs = ops::CausalSoftmax(ops::BatchedMatmul(q, k.Transpose(-2, -1)), sc);
      return ops::BatchedMatmul(probs, v);
    };
    auto mat_bwd = [&] {
      const Tensor ds = ops::CausalSoftmaxBackward(ops::BatchedMatmul(go, v.Transpose(-2, -1)), probs, sc);
      ops::BatchedMatmul(ds, k);
      ops::BatchedMatmul(ds.Transpose(-2, -1), q);
      ops::BatchedMatmul(probs.Transpose(-2, -1), go);
    };
    ops::AttentionResult fused = ops::CausalAttention(q, k, v, sc);
    mat_fwd();
    Time("attention_materialized_fwd", reps, [&] { mat_fwd(); });
    Time("attention_materialized_bwd", reps, mat_bwd);
    Time("attention_fused_fwd", reps, [&] { fused = ops::CausalAttention(q, k, v, sc); });
    Time("attention_fused_bwd", reps, [&] { ops::CausalAttentionBackward(go, q, k, v, fused.out, fused.lse, sc); });
    // Memory: what the forward keeps for the backward (besides q, k, v and
    // the output, which both keep), and the peak of tensor memory in use
    // during forward + backward above what exists before (the CPU
    // allocator's count; the fused kernels' per-head scratch is O(T D)
    // std::vector memory outside it, printed beside).
    if (std::string("attention_memory").find(absl::GetFlag(FLAGS_only)) != std::string::npos) {
      auto peak_of = [](const std::function<void()>& fn) {
        psync::CpuCachingAllocator& a = psync::CpuCachingAllocator::Get();
        const size_t before = a.stats().in_use_bytes;
        a.ResetPeak();
        fn();
        return a.stats().peak_in_use_bytes - before;
      };
      probs = Tensor();
      const size_t mat_peak = peak_of([&] {
        mat_fwd();
        mat_bwd();
        probs = Tensor();
      });
      fused = {};
      const size_t fused_peak = peak_of([&] {
        fused = ops::CausalAttention(q, k, v, sc);
        ops::CausalAttentionBackward(go, q, k, v, fused.out, fused.lse, sc);
        fused = {};
      });
      const double mib = 1024.0 * 1024.0;
      const double mat_saved = static_cast<double>(B * H * T * T) * 4 / mib;
      const double fused_saved = static_cast<double>(B * H * T) * 4 / mib;
      const double scratch = static_cast<double>(8 * T * D + 2 * 64 * 64 + 3 * 64) * 4 / mib;
      std::printf("attention memory: saved for backward: materialized %.2f MiB (probs [B,H,T,T]), fused %.4f MiB "
                  "(lse [B,H,T]); peak tensor memory fwd+bwd: materialized %.2f MiB, fused %.2f MiB (+%.3f MiB "
                  "per-call scratch)\n",
                  mat_saved, fused_saved, static_cast<double>(mat_peak) / mib, static_cast<double>(fused_peak) / mib,
                  scratch);
      std::printf("MEMORY impl=psync op=attention materialized_saved_mib=%.4f fused_saved_mib=%.4f "
                  "materialized_peak_mib=%.3f fused_peak_mib=%.3f fused_scratch_mib=%.3f\n",
                  mat_saved, fused_saved, static_cast<double>(mat_peak) / mib, static_cast<double>(fused_peak) / mib,
                  scratch);
    }
  }

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
