// psync-worker: one data-parallel training process (docs/cli-contract.md).
// Built through the public API exactly as a program with its own model is
// (psync/runtime/worker_main.h): the built-in models are in the registry.
#include "psync/runtime/worker_main.h"

int main(int argc, char** argv) { return psync::runtime::WorkerMain(argc, argv); }
