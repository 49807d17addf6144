// The shared-memory collectives, one algorithm per file, all written in
// ShmContext's step protocol and run on the calling thread (one collective
// at a time per context). Every rank of the local group must call the same
// collective with the same element count, type and root; the first step
// checks that and fails with FailedPrecondition naming the mismatch.
//
// Summation order is fixed by local rank (reduce_sum.h), so results are
// bitwise identical on every rank and every run, whatever the chunking.
// Every function returns the context's errors (peer died / aborted /
// timed out / local abort) annotated with the op's description.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/shm/reduce_sum.h"
#include "worker/comm/shm/shm_context.h"

namespace psync::comm::shm {

// Sum of every rank's `data` into every rank's `data`. Up to
// options.small_bytes: one step, every rank sums all inputs
// (allreduce_symmetric.cc); above: reduce-scatter + all-gather in pieces
// through the slots (allreduce_sharded.cc).
// `scale` != 1: the result is multiplied by it in the same pass (an
// average without a second pass over the tensor; see SumInto).
absl::Status Allreduce(ShmContext& ctx, const std::string& desc, const std::string& name, void* data, size_t count,
                       DType type, float scale = 1.0f);
absl::Status AllreduceSymmetric(ShmContext& ctx, ShmContext::Op& op, void* data, size_t count, DType type,
                                float scale);
absl::Status AllreduceSharded(ShmContext& ctx, ShmContext::Op& op, void* data, size_t count, DType type, float scale);
// The piecewise reduce-scatter both of the above share (allreduce_sharded.cc):
// with `gather`, each step also publishes the reduced piece and copies every
// peer's back (the allreduce); without, only this rank's shard is reduced.
absl::Status ShardedSteps(ShmContext& ctx, ShmContext::Op& op, void* data, size_t count, DType type, float scale,
                          bool gather);

// After it, this rank's shard (ShardLayout(count, local_size, ...).shard(
// local_rank)) of `data` holds the sum (times `scale`); the rest of `data`
// is unchanged.
absl::Status ReduceScatter(ShmContext& ctx, const std::string& desc, const std::string& name, void* data,
                           size_t count, DType type, float scale = 1.0f);
// Every rank's shard of `data` is copied into every other rank's `data`.
absl::Status Allgather(ShmContext& ctx, const std::string& desc, const std::string& name, void* data, size_t count,
                       DType type);
// The same two on a tensor in a registered buffer, in place (no staging
// through the slots); arguments as AllreduceInPlace. Both return once every
// rank is done with our buffer.
absl::Status ReduceScatterInPlace(ShmContext& ctx, const std::string& desc, const std::string& name,
                                  const std::vector<char*>& bases, uint64_t buffer_id, size_t offset_bytes,
                                  size_t count, DType type, float scale = 1.0f);
absl::Status AllgatherInPlace(ShmContext& ctx, const std::string& desc, const std::string& name,
                              const std::vector<char*>& bases, uint64_t buffer_id, size_t offset_bytes, size_t count,
                              DType type);
// Local rank `root`'s `bytes` bytes at `data` are copied to every rank.
absl::Status Broadcast(ShmContext& ctx, const std::string& desc, const std::string& name, void* data, size_t bytes,
                       int root);
// Local rank `root`'s `data` receives the sum; the others' are unchanged.
absl::Status Reduce(ShmContext& ctx, const std::string& desc, const std::string& name, void* data, size_t count,
                    DType type, int root);
absl::Status Barrier(ShmContext& ctx, const std::string& desc);
// Allreduce of a tensor in a registered buffer (buffer_registry.h), in
// place: `bases` are every local rank's mapping of the buffer, the tensor
// starts `offset_bytes` into it. Returns once every rank is done with ours.
absl::Status AllreduceInPlace(ShmContext& ctx, const std::string& desc, const std::string& name,
                              const std::vector<char*>& bases, uint64_t buffer_id, size_t offset_bytes, size_t count,
                              DType type, float scale = 1.0f);
// The first half both in-place collectives share: every rank's data in
// place (kCopied, descriptors checked), this rank's shard summed from every
// rank's buffer into its own, times `scale` (kReduced published). Returns
// the step. allreduce_in_place.cc.
absl::StatusOr<uint64_t> ReduceOwnShardInPlace(ShmContext& ctx, ShmContext::Op& op, const std::vector<char*>& bases,
                                                size_t offset_bytes, size_t count, DType type, float scale);
// Every rank's byte string, in local rank order.
absl::StatusOr<std::vector<std::string>> AllgatherBytes(ShmContext& ctx, const std::string& desc,
                                                        const std::string& mine);

// The descriptor of a collective (kind, count, type, root, truncated name).
ShmContext::Op MakeOp(const std::string& desc, OpKind kind, const std::string& name, size_t count, DType type,
                      int root);

}  // namespace psync::comm::shm
