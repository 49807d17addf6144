// llama: a psync-worker that also trains --model=llama (llama_model.h), a
// Llama-style decoder written only against psync's public API, with RMSNorm,
// RoPE, SiLU and the GQA head sharing as custom autograd functions.
//
//   psync-launch --nproc=2 --worker-bin=./llama -- --model=llama --data=FILE \
//       --data-format=bytes --block-size=16 --n-layer=2 --n-head=4 --n-kv-head=2 --n-embd=32
#include <cstdio>
#include <string>

#include <psync/psync.h>

#include "llama_model.h"

int main(int argc, char** argv) {
  if (absl::Status st = psync::nn::RegisterModel(llama::LlamaRegistration()); !st.ok()) {
    std::fprintf(stderr, "llama: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  return psync::runtime::WorkerMain(argc, argv);
}
