// Gradient compression hooks, like PyTorch DDP's bf16_compress_hook /
// fp16_compress_hook: divide the bucket by the world size, cast it to
// bfloat16 or float16, allreduce the half-size copy, cast the result back
// into the bucket. Half the bytes cross the wire; each averaged gradient is
// rounded to 8 (bfloat16) or 11 (float16) significant bits. Dividing first
// keeps float16 sums in range. Off by default because it changes the
// numbers (worker/ddp/README.md says by how much).
//
// The casts run on the training thread (on CUDA: kernels on the compute
// stream), the cast back inside the first successful Wait (comm::ThenWork), so it
// is ordered after the collective. Every group sums 16-bit tensors: shm/hier
// accumulate in float and round once per element; Gloo rounds after each
// pairwise step; NCCL uses its native bf16/fp16 sums.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "psync/ddp/comm_hook.h"
#include "psync/tensor/dtype.h"

namespace psync::ddp {

// `wire` is kBFloat16 or kFloat16.
std::shared_ptr<CommHook> CompressionHook(DType wire);

// --grad-compression: "none" (null: the default allreduce hook), "bf16",
// "fp16"; InvalidArgument naming the flag otherwise.
absl::StatusOr<std::shared_ptr<CommHook>> CommHookFromFlag(const std::string& value);

}  // namespace psync::ddp
