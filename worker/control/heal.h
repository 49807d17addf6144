// Healing from a peer (live recovery, issue 32): one rank's whole training
// state (parameters, optimizer state, step, data position, RNG words, as a
// checkpoint holds them) sent to the other ranks of a process group over the
// data plane, so a replacement rank, or a survivor that is one step behind,
// starts the next iteration with exactly the source's state, without a disk
// and without restarting anyone.
//
// The state travels as the tensors themselves, not as a file's bytes: a
// header (heal_header.h: the manifest, every tensor's name, dtype and shape,
// each piece's CRC-32C; an all-gather of short strings) tells every rank
// what comes, then each piece is one broadcast from the source, straight
// from its tensor into the receiver's (small tensors packed, in chunks of
// at most `chunk_bytes`). A receiver may name the tensors to receive into
// (its own live weights and optimizer state), so a replacement's state is
// written once, where it lives; anything it does not name arrives in a new
// tensor. Every piece is checked against its CRC-32C as it lands; a
// damaged one is DataLoss naming the source, the piece and its tensors,
// reported once every piece has arrived (the ranks stay in step).
//
// Cost: the source reads its state twice (the CRCs, the send) and copies
// only its small tensors (into one staging buffer of at most chunk_bytes);
// a receiver writes each byte once (its destination) and reads it once
// (the CRC). The transport (Gloo's TCP, shared memory) adds its own copies.
// Every rank of the group receives every piece: the first version heals the
// whole new membership at once, which is what a replacement joining needs.
//
// Threads: the training thread of every rank in the group (a collective).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "psync/comm/process_group.h"
#include "psync/optim/optimizer.h"
#include "worker/checkpoint/contents.h"

namespace psync::control {

struct HealOptions {
  int source = 0;                              // the rank whose state everyone takes
  size_t chunk_bytes = size_t{64} << 20;       // the most bytes in one broadcast (the source's value rules)
  std::chrono::milliseconds timeout{30000};    // per broadcast
};

// Collective: every rank of `group` calls it with the same options. The
// source passes its state in `mine` (CPU or device tensors; ignored
// elsewhere) and gets nullopt back. Every other rank gets the source's
// state, checked: its tensors are those of `into` (may be null) where an
// entry of the same name, dtype and shape is a contiguous CPU tensor there
// (parameters by name, optimizer state by key), new CPU tensors otherwise.
// Load it with checkpoint::LoadParameters / LoadOptimizerState (a tensor
// received in place is not copied again) and the trainer's data position
// and RNG, as --resume does. A tensor of `into` may be written even when
// the call fails: pass null unless its contents may be lost.
// Errors name the source rank: InvalidArgument for bad options or no state
// on the source, DataLoss for a damaged header or piece (naming the piece
// and its tensors), the group's own error when a peer is lost meanwhile.
absl::StatusOr<std::optional<checkpoint::CheckpointContents>> ShareTrainingState(
    comm::ProcessGroup& group, const HealOptions& options, const checkpoint::CheckpointContents* mine,
    const checkpoint::CheckpointContents* into = nullptr);

// Live recovery's heal of a training loop's state (psync-worker's and
// control::Job's), after a generation formed in-process with a heal source:
// rank `options.source` sends `params` and `optimizer`'s whole state with
// `manifest` (manifest.step: the generation's start), every other rank
// loads them, so every rank starts that step with the same bits. Before DDP
// is built (its first broadcast then carries the healed weights). A
// collective over `group`. `held_step`: the step of the state this rank
// holds (none: a fresh process): a rank at `manifest.step` or without state
// receives straight into its live tensors; one at another step keeps its
// state intact until the whole transfer checked out. Errors name this rank
// and the source and carry their exit code: the group's own when a peer is
// lost meanwhile (4), DataLoss for a damaged transfer and InvalidArgument
// for a state that does not fit (1). Not for a sharded optimizer (--zero):
// its state is not whole on one rank.
absl::Status HealTrainingState(comm::ProcessGroup& group, const HealOptions& options,
                               std::optional<int64_t> held_step, const optim::NamedParams& params,
                               optim::Optimizer& optimizer, const checkpoint::CheckpointManifest& manifest);

}  // namespace psync::control
