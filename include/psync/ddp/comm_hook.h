// Communication hooks: what the Reducer does with a full bucket, like
// PyTorch DDP's register_comm_hook. The Reducer hands every bucket, in
// bucket index order on every rank, to its hook and waits for the returned
// Work at the end of backward; when that Wait returns OK the bucket's
// buffer holds the gradient AVERAGED over the ranks (the Reducer does not
// divide again).
//
// Hooks (make them with the functions below):
//   allreduce   ProcessGroup::AllreduceAverage: the sum over the group times
//               1/world (psync's default: exact to float32 round-off; shm
//               fuses the division into the reduction)
//   bf16/fp16   compression (compression_hook.h): divide, cast the bucket to
//               bfloat16 / float16, allreduce the half-size buffer, cast
//               back; half the bytes on the wire, about 3 / 2 significant
//               decimal digits per gradient (see worker/ddp/README.md)
//
// A hook whose Run leaves exactly sum x 1/world in every float32 element
// (CarriesStepTag) lets the reducer's step tags ride in bucket 0's buffer
// (reducer.h); other hooks get a separate small allreduce for them.
//
// Threads: Run is called on the training (backward) thread; the returned
// Work's Wait too. Work that must happen after the collective (dividing,
// casting back) runs inside the first successful Wait (comm::ThenWork), so it is
// ordered after the collective on the training thread (and, on CUDA, on the
// compute stream after the collective's completion event).
#pragma once

#include <memory>
#include <string>

#include "psync/comm/process_group.h"
#include "psync/comm/work.h"
#include "psync/tensor/tensor.h"

namespace psync::ddp {

struct GradBucket {
  size_t index = 0;
  // The flat gradients (slots of the parameters), modified in place. Bucket
  // 0's may end with the reducer's step tags (CarriesStepTag).
  Tensor buffer;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // Starts reducing `bucket` over `group`; see the contract above.
  virtual std::shared_ptr<comm::Work> Run(comm::ProcessGroup& group, const GradBucket& bucket) = 0;
  // True when Run leaves exactly the float32 sum times 1/world in every
  // element of the buffer: then the reducer appends its step tags
  // (step_check.h) to bucket 0 instead of an allreduce of their own.
  virtual bool CarriesStepTag() const { return false; }
};

// The default hook: AllreduceAverage.
std::shared_ptr<CommHook> AllreduceHook();
// ZeRO's hook (--zero=1|2): ReduceScatterAverage. Its Work leaves the
// average in this rank's shard of the (padded) bucket only; the rest of the
// buffer is scratch. The reducer installs it itself under ZeRO.
std::shared_ptr<CommHook> ReduceScatterHook();


}  // namespace psync::ddp
