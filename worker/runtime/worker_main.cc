#include "psync/runtime/worker_main.h"

#include <cstdio>
#include <string>

#include "psync/common/exit_code.h"
#include "psync/common/status_from_exception.h"
#include "worker/runtime/worker.h"
#include "worker/runtime/worker_flags.h"
#include "worker/tensor/cpu/blas_core.h"

namespace psync::runtime {

int WorkerMain(int argc, char** argv) {
  // Why first: OpenBLAS's kernels are fixed when it loads; on a VM that hides
  // the CPU model they are its slowest, so re-run once with better ones.
  ops::ReexecForBetterOpenBlasCore(argv);
  try {
    std::string help;
    absl::StatusOr<WorkerOptions> opt = ParseWorkerOptions(argc, argv, ProcessEnv(), &help);
    if (!opt.ok()) {
      std::fprintf(stderr, "psync-worker: %s\n", std::string(opt.status().message()).c_str());
      return kExitBadInput;
    }
    if (!help.empty()) {
      std::fputs(help.c_str(), stdout);
      return 0;
    }
    return RunWorker(*opt);
  } catch (...) {
    const absl::Status st = StatusFromException("internal error");
    std::fprintf(stderr, "psync-worker: %s\n", std::string(st.message()).c_str());
    return kExitInternal;
  }
}

}  // namespace psync::runtime
