// Bucket: one flat gradient buffer reduced by a single collective.
//
// Every parameter of the bucket owns a slot: a view (Tensor::View) of the
// flat buffer with the parameter's shape. After the first synchronised
// backward, each parameter's grad IS its slot view (gradient_as_bucket_view),
// so AccumulateGrad accumulates straight into the buffer and nothing is
// copied back out after the allreduce.
//
// Threads: a Bucket belongs to its Reducer and is touched only on the
// backward (training) thread. The communication thread touches the buffer's
// memory only between launch and the completion of `work`, while the
// backward thread leaves it alone (the slots of a launched bucket are all
// ready, so no AccumulateGrad writes to them until the next backward).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "psync/autograd/variable.h"
#include "psync/comm/process_group.h"
#include "psync/comm/work.h"
#include "psync/tensor/tensor.h"

namespace psync::ddp {

using Clock = std::chrono::steady_clock;

struct BucketSlot {
  size_t param = 0;    // index into the reducer's parameter list
  int64_t offset = 0;  // in elements, into the bucket's buffer
  Tensor view;         // buffer.View(offset, parameter shape)
};

class Bucket {
 public:
  // Makes a zeroed flat buffer on the parameters' device (all of
  // `param_indices` must share it; see ValidateBucketPlan) and cuts a slot
  // view for each. With `group`, the buffer is the group's collective buffer
  // (ProcessGroup::NewCollectiveBuffer: shared memory for shm, reduced in
  // place), and Build is collective: every rank builds the same buckets in
  // the same order. `tail_elements` more floats follow the slots (the
  // reducer's step tags, reduced with the gradients); the buffer has at
  // least `min_elements` (ZeRO pads it to equal shards, zero_buckets.h).
  // Throws std::runtime_error when the buffer cannot be made.
  static Bucket Build(size_t index, const std::vector<size_t>& param_indices,
                      const std::vector<autograd::Variable>& params, comm::ProcessGroup* group = nullptr,
                      int64_t tail_elements = 0, int64_t min_elements = 0);
  // The same bucket cut from the front of `storage` (float32, at least as
  // long) instead of a buffer of its own: --zero=2's buckets share one
  // staging buffer (zero_staging.h).
  static Bucket BuildOn(Tensor storage, size_t index, const std::vector<size_t>& param_indices,
                        const std::vector<autograd::Variable>& params, int64_t min_elements);

  size_t index() const { return index_; }
  const Tensor& buffer() const { return buffer_; }
  Tensor& mutable_buffer() { return buffer_; }
  const std::vector<BucketSlot>& slots() const { return slots_; }
  std::vector<BucketSlot>& slots_mutable() { return slots_; }
  // The floats after the slots (undefined when Build got no tail).
  const Tensor& tail() const { return tail_; }
  size_t nbytes() const { return buffer_.nbytes(); }
  std::vector<size_t> param_indices() const;

  // ---- per-iteration state (backward thread) ----
  // Parameters of this bucket not yet marked ready in this backward.
  size_t pending = 0;
  bool launched = false;
  bool completed = false;          // completion observed by the backward thread
  std::shared_ptr<comm::Work> work;
  Clock::time_point launch_time{};
  Clock::time_point complete_time{};  // when the backward thread saw it complete
  // Back to "nothing ready" for the next backward.
  void ResetForIteration();

 private:
  Bucket(size_t index, Tensor buffer, std::vector<BucketSlot> slots, Tensor tail)
      : index_(index), buffer_(std::move(buffer)), slots_(std::move(slots)), tail_(std::move(tail)) {}
  static Bucket Cut(size_t index, Tensor buffer, const std::vector<size_t>& param_indices,
                    const std::vector<autograd::Variable>& params, int64_t slots_total, int64_t tail_elements);
  size_t index_ = 0;
  Tensor buffer_;
  std::vector<BucketSlot> slots_;
  Tensor tail_;
};

// Copy-in semantics, run when a parameter is marked ready:
//  * grad is the slot view already: it was accumulated in place; nothing to do.
//  * grad is another tensor (first backward, or after zero_grad with
//    set_to_none, or a gradient accumulated locally under no_sync): copy it
//    into the slot and make grad the view.
//  * grad undefined (a parameter unused on this rank): zero the slot, so this
//    rank contributes zeros; grad stays undefined (finalize decides).
void CopyGradIntoSlot(BucketSlot& slot, const autograd::Variable& param);

// Re-points a parameter's defined grad at `slot` (copying its values): used
// when buckets are rebuilt, so gradients survive the rebuild.
void MoveGradIntoSlot(BucketSlot& slot, const autograd::Variable& param);

// A parameter's name in errors: its own, or "parameter #i" (i: its index).
std::string ParameterName(const autograd::Variable& param, size_t index);
// The bytes of the parameters' values (every one whole).
int64_t ParameterBytes(const std::vector<autograd::Variable>& params);
// The names of the parameters not marked in `ready` (one flag each).
std::vector<std::string> UnreadyParameterNames(const std::vector<autograd::Variable>& params,
                                               const std::vector<uint8_t>& ready);

// Where a parameter's gradient lives: its bucket and its slot there.
struct SlotLocation {
  size_t bucket = 0;
  size_t slot = 0;
};

// After a synchronised backward of plain DDP the buckets hold the averages:
// a parameter used on some rank (maybe not this one) gets its slot view as
// grad; one unused on every rank (`global_used`, when given) keeps its grad
// (undefined stays undefined, so the optimizer skips it). Returns how many
// were unused everywhere.
size_t AdoptAveragedGradients(const std::vector<autograd::Variable>& params, const std::vector<Bucket>& buckets,
                              const std::vector<SlotLocation>& locations, const std::vector<uint8_t>* global_used);

}  // namespace psync::ddp
