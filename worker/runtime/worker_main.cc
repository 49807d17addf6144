// psync-worker: one data-parallel training process. See worker/runtime/worker.h
// and docs/cli-contract.md.
#include <cstdio>
#include <exception>
#include <string>

#include "worker/runtime/trainer.h"
#include "worker/tensor/cpu/blas_core.h"
#include "worker/runtime/worker.h"
#include "worker/runtime/worker_flags.h"

int main(int argc, char** argv) {
  // Why first: OpenBLAS's kernels are fixed when it loads; on a VM that hides
  // the CPU model they are its slowest, so re-run once with better ones.
  psync::ops::ReexecForBetterOpenBlasCore(argv);
  std::string help;
  absl::StatusOr<psync::runtime::WorkerOptions> opt =
      psync::runtime::ParseWorkerOptions(argc, argv, psync::runtime::ProcessEnv(), &help);
  if (!opt.ok()) {
    std::fprintf(stderr, "psync-worker: %s\n", std::string(opt.status().message()).c_str());
    return psync::runtime::kExitBadInput;
  }
  if (!help.empty()) {
    std::fputs(help.c_str(), stdout);
    return 0;
  }
  try {
    return psync::runtime::RunWorker(*opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "psync-worker: internal error: %s\n", e.what());
    return psync::runtime::kExitInternal;
  }
}
