// Which OpenBLAS kernels this process runs, and which it should.
//
// Debian's OpenBLAS picks its kernels at load time from the CPU's model
// number. On virtual machines that hide the model (Firecracker, some cloud
// instance types report a generic "Intel Xeon Processor"), it falls back to
// its oldest x86-64 kernels ("Prescott", SSE3), even on a CPU with AVX-512:
// measured 2-3x slower (the GPT step bench, one thread: 218 ms a step with
// Prescott, 71-99 ms with SkylakeX on the same VM). The kernels can only be chosen before
// the library loads (env OPENBLAS_CORETYPE), so psync-worker re-executes
// itself once with the variable set, when it is unset and the CPU's
// features (not its model) call for better kernels than OpenBLAS chose.
#pragma once

#include <optional>
#include <string>

namespace psync::ops {

// x86 features that decide which OpenBLAS kernels a CPU can run.
struct CpuFeatures {
  bool avx = false;
  bool avx2_fma = false;    // AVX2 and FMA3 (OpenBLAS "Haswell")
  bool avx512 = false;      // AVX-512 F, CD, BW, DQ and VL (OpenBLAS "SkylakeX")
};

// This CPU's features (cpuid); all false on other architectures.
CpuFeatures HostCpuFeatures();

// The kernels OpenBLAS chose at load time (openblas_get_corename()).
std::string OpenBlasCoreName();

// The OPENBLAS_CORETYPE to use instead of `detected` on a CPU with
// `features`, or nullopt when `detected` is already as good or is a core
// this table does not know (never second-guess an unknown name).
std::optional<std::string> BetterOpenBlasCore(const std::string& detected, const CpuFeatures& features);

// When OPENBLAS_CORETYPE is unset and BetterOpenBlasCore names a core:
// sets it and execv()s /proc/self/exe with `argv` (does not return on
// success). Otherwise, or when exec fails, returns and the process goes on
// with the kernels it has. Call first thing in main(), before any thread.
void ReexecForBetterOpenBlasCore(char** argv);

}  // namespace psync::ops
