// CPU optimizer kernels (see ops/optim.h for the rounding contract).
//
// Each update is one loop over the parameter's elements. The fused
// multiply-adds must be real fmas (one rounding), like torch's AVX2 kernels:
// on a CPU with FMA the loop runs in a clone compiled for AVX2+FMA (vector
// fma, sqrt and div: all correctly rounded, so the same bits as the scalar
// code); elsewhere std::fma falls back to libm's exact software fma (slow,
// same results). This file is compiled with -ffp-contract=off, so no other
// a*b+c is fused behind our back, and -fno-math-errno, so sqrt vectorizes.
#include <algorithm>
#include <cmath>

#include "worker/tensor/cpu/vec_math.h"
#include "worker/tensor/ops/optim_kernels.h"

namespace psync::ops {
namespace {

// copy: null, or where the new p goes rounded to bfloat16 (the weight copy
// of a bf16 step, written in the same pass).
template <typename T>
struct AdamWArgs {
  T* p;
  const T* g;
  T* m;
  T* v;
  uint16_t* copy;  // bfloat16 bits
  int64_t n;
  T decay, beta1, omb1, beta2, omb2, bc2_sqrt, eps, neg_step_size;
};

template <typename T>
struct SgdArgs {
  T* p;
  const T* g;
  T* buf;
  BFloat16* copy;
  int64_t n;
  T wd, momentum, neg_lr;
};

// Which terms an SGD step has: fixed per call, so each combination gets its
// own branch-free (vectorizable) loop.
enum class Momentum { kNone, kFirst, kRunning };

// The loop bodies, inlined into both the FMA clone and the portable build.
template <typename T>
[[gnu::always_inline]] inline void AdamWRange(const AdamWArgs<T>& a, int64_t begin, int64_t end) {
  T* __restrict p = a.p;
  const T* __restrict g = a.g;
  T* __restrict m = a.m;
  T* __restrict v = a.v;
  for (int64_t i = begin; i < end; ++i) {
    const T gi = g[i];
    const T pi = p[i] * a.decay;                              // param.mul_(1 - lr*wd)
    const T mi = std::fma(gi, a.omb1, m[i] * a.beta1);        // exp_avg.mul_(b1).add_(g, alpha=1-b1)
    const T vi = std::fma(a.omb2 * gi, gi, v[i] * a.beta2);   // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
    const T denom = std::sqrt(vi) / a.bc2_sqrt + a.eps;       // (sqrt(v) / bc2_sqrt).add_(eps)
    p[i] = pi + (a.neg_step_size * mi) / denom;               // param.addcdiv_(m, denom, -step_size)
    m[i] = mi;
    v[i] = vi;
  }
}

// kCopy: the bfloat16 copy of each block of p right after the block's
// update, while it is in L1 (one pass over memory; a single loop doing
// both does not vectorize with GCC 12).
template <typename T, bool kCopy>
[[gnu::always_inline]] inline void AdamWLoop(const AdamWArgs<T>& a) {
  if constexpr (!kCopy) {
    AdamWRange(a, 0, a.n);
  } else {
    constexpr int64_t kBlock = 2048;
    const T* __restrict p = a.p;
    uint16_t* __restrict copy = a.copy;
    for (int64_t b = 0; b < a.n; b += kBlock) {
      const int64_t e = std::min(a.n, b + kBlock);
      AdamWRange(a, b, e);
      for (int64_t i = b; i < e; ++i) copy[i] = cpu::Bf16Bits(static_cast<float>(p[i]));
    }
  }
}

template <typename T, bool kDecay, Momentum kMomentum>
[[gnu::always_inline]] inline void SgdLoop(const SgdArgs<T>& a) {
  T* __restrict p = a.p;
  const T* __restrict g = a.g;
  T* __restrict buf = a.buf;
  for (int64_t i = 0; i < a.n; ++i) {
    T d = g[i];
    if constexpr (kDecay) d = std::fma(p[i], a.wd, d);  // d_p = g.add(p, alpha=wd)
    if constexpr (kMomentum == Momentum::kRunning) {
      d = buf[i] * a.momentum + d;  // buf.mul_(momentum).add_(d_p)
    }
    if constexpr (kMomentum != Momentum::kNone) buf[i] = d;  // the first step: buf = clone(d_p)
    p[i] = std::fma(d, a.neg_lr, p[i]);  // p.add_(d_p, alpha=-lr)
  }
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define PSYNC_OPTIM_FMA_CLONE 1
template <typename T, bool kCopy>
[[gnu::target("avx2,fma")]] void AdamWFma(const AdamWArgs<T>& a) { AdamWLoop<T, kCopy>(a); }
template <typename T, bool kDecay, Momentum kMomentum>
[[gnu::target("avx2,fma")]] void SgdFma(const SgdArgs<T>& a) { SgdLoop<T, kDecay, kMomentum>(a); }
bool HaveFma() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
}
#endif

template <typename T, bool kCopy>
void AdamWImpl(const AdamWArgs<T>& a) {
#ifdef PSYNC_OPTIM_FMA_CLONE
  if (HaveFma()) return AdamWFma<T, kCopy>(a);
#endif
  AdamWLoop<T, kCopy>(a);
}

template <typename T, bool kDecay, Momentum kMomentum>
void SgdImpl(const SgdArgs<T>& a) {
#ifdef PSYNC_OPTIM_FMA_CLONE
  if (HaveFma()) return SgdFma<T, kDecay, kMomentum>(a);
#endif
  SgdLoop<T, kDecay, kMomentum>(a);
}

template <typename T, bool kDecay>
void SgdImpl(const SgdArgs<T>& a, Momentum momentum) {
  switch (momentum) {
    case Momentum::kNone: return SgdImpl<T, kDecay, Momentum::kNone>(a);
    case Momentum::kFirst: return SgdImpl<T, kDecay, Momentum::kFirst>(a);
    case Momentum::kRunning: return SgdImpl<T, kDecay, Momentum::kRunning>(a);
  }
}

template <typename T>
T* Ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

class CpuOptim final : public OptimKernels {
 public:
  void AdamW(const std::vector<AdamWJob>& jobs) const override {
    for (const AdamWJob& j : jobs) {
      const AdamWScalars& s = j.s;
      PSYNC_DISPATCH_FLOAT_TYPES(j.p.dtype(), "AdamWUpdate", [&] {
        using T = scalar_t;
        const AdamWArgs<T> a{Ptr<T>(j.p),
                             Ptr<const T>(j.g),
                             Ptr<T>(j.m),
                             Ptr<T>(j.v),
                             j.copy.defined() ? Ptr<uint16_t>(j.copy) : nullptr,
                             j.p.numel(),
                             static_cast<T>(s.decay),
                             static_cast<T>(s.beta1),
                             static_cast<T>(s.one_minus_beta1),
                             static_cast<T>(s.beta2),
                             static_cast<T>(s.one_minus_beta2),
                             static_cast<T>(s.bc2_sqrt),
                             static_cast<T>(s.eps),
                             static_cast<T>(s.neg_step_size)};
        if (a.copy != nullptr) {
          AdamWImpl<T, true>(a);
        } else {
          AdamWImpl<T, false>(a);
        }
      });
    }
  }

  void Sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdScalars& s,
           const Tensor& copy) const override {
    PSYNC_DISPATCH_FLOAT_TYPES(p.dtype(), "SgdUpdate", [&] {
      using T = scalar_t;
      const SgdArgs<T> a{Ptr<T>(p),
                         Ptr<const T>(g),
                         buf.defined() ? Ptr<T>(buf) : nullptr,
                         nullptr,
                         p.numel(),
                         static_cast<T>(s.weight_decay),
                         static_cast<T>(s.momentum),
                         static_cast<T>(s.neg_lr)};
      // torch tests the Python doubles: `if weight_decay != 0`, `if momentum != 0`.
      const Momentum mom = s.momentum == 0 ? Momentum::kNone : (s.first ? Momentum::kFirst : Momentum::kRunning);
      if (s.weight_decay != 0) {
        SgdImpl<T, true>(a, mom);
      } else {
        SgdImpl<T, false>(a, mom);
      }
      // SGD trains no bf16 model in practice: the copy is a second pass.
      if (copy.defined()) {
        const T* pp = Ptr<const T>(p);
        BFloat16* c = Ptr<BFloat16>(copy);
        for (int64_t i = 0, n = p.numel(); i < n; ++i) c[i] = cpu::Store<BFloat16>(pp[i]);
      }
    });
  }
};

}  // namespace

const OptimKernels& CpuOptimKernels() {
  static const CpuOptim kernels;
  return kernels;
}

}  // namespace psync::ops
