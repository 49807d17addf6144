// psync-worker: one data-parallel training process. See worker/runtime/worker.h
// and docs/cli-contract.md.
#include <cstdio>
#include <string>

#include "common/exit_code.h"
#include "common/status_from_exception.h"
#include "worker/runtime/worker.h"
#include "worker/runtime/worker_flags.h"
#include "worker/tensor/cpu/blas_core.h"

int main(int argc, char** argv) {
  // Why first: OpenBLAS's kernels are fixed when it loads; on a VM that hides
  // the CPU model they are its slowest, so re-run once with better ones.
  psync::ops::ReexecForBetterOpenBlasCore(argv);
  std::string help;
  absl::StatusOr<psync::runtime::WorkerOptions> opt =
      psync::runtime::ParseWorkerOptions(argc, argv, psync::runtime::ProcessEnv(), &help);
  if (!opt.ok()) {
    std::fprintf(stderr, "psync-worker: %s\n", std::string(opt.status().message()).c_str());
    return psync::kExitBadInput;
  }
  if (!help.empty()) {
    std::fputs(help.c_str(), stdout);
    return 0;
  }
  try {
    return psync::runtime::RunWorker(*opt);
  } catch (...) {
    const absl::Status st = psync::StatusFromException("internal error");
    std::fprintf(stderr, "psync-worker: %s\n", std::string(st.message()).c_str());
    return psync::kExitInternal;
  }
}
