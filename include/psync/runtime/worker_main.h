// WorkerMain: psync-worker as a function, for a program that brings its own
// model. Register the model (psync/nn/models/registry.h), then hand main's
// arguments over:
//
//   int main(int argc, char** argv) {
//     if (absl::Status st = psync::nn::RegisterModel(MyModel()); !st.ok()) { ...; return 2; }
//     return psync::runtime::WorkerMain(argc, argv);
//   }
//
// The program is then a psync-worker in every respect (docs/cli-contract.md):
// every flag, exit code, checkpoint and --resume, metric, and the
// coordinator's plans and stops, with the built-in models (mlp, gpt, cnn)
// and the registered ones (--model=NAME, their own flags in --help).
// psync-launch runs it with --worker-bin=PATH. psync-worker's own main is
// exactly this call.
#pragma once

namespace psync::runtime {

// Parses the flags and the environment (RANK, WORLD_SIZE, MASTER_ADDR, ...),
// trains, and returns the process exit code (0 done, 2 bad flags or input,
// 3 rendezvous, 4 a peer lost, 5 the coordinator lost; --help: 0). Prints
// a one-line reason to stderr on failure. Never throws.
int WorkerMain(int argc, char** argv);

}  // namespace psync::runtime
