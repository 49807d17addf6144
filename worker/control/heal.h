// Healing from a peer (live recovery, issue 32): one rank's whole training
// state (parameters, optimizer state, step, data position, RNG words, as a
// checkpoint holds them) sent to the other ranks of a process group over the
// data plane, so a replacement rank, or a survivor that is one step behind,
// starts the next iteration with exactly the source's state, without a disk
// and without restarting anyone.
//
// The bytes are a checkpoint file's (checkpoint::SerializeCheckpoint): the
// same names, manifest and CRC32 over everything, read back with every check
// a file gets. After a header (total size, chunk count, the whole payload's
// CRC32; an all-gather of short strings) they travel as broadcasts from the
// source of at most `chunk_bytes` each, every chunk framed with its index,
// length and CRC32, so a damaged or missing chunk is named (DataLoss) before
// anything is loaded.
//
// Cost: the source holds one serialised copy of its state while it sends; a
// receiver holds the received bytes and the decoded tensors until it loads
// them; each side one chunk buffer. Every rank of the group receives every
// chunk: the first version heals the whole new membership at once, which
// is what a replacement joining needs.
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
#include "worker/checkpoint/contents.h"

namespace psync::control {

struct HealOptions {
  int source = 0;                              // the rank whose state everyone takes
  size_t chunk_bytes = size_t{64} << 20;       // the most bytes in one all-gather
  std::chrono::milliseconds timeout{30000};    // per chunk
};

// Collective: every rank of `group` calls it with the same options. The
// source passes its state in `mine` (ignored elsewhere) and gets nullopt
// back; every other rank gets the source's state, checked and decoded (CPU
// tensors: load it with checkpoint::LoadParameters / LoadOptimizerState and
// the trainer's data position and RNG, as --resume does). Errors name the
// source rank and the chunk: InvalidArgument for bad options or a missing
// state on the source, DataLoss for a damaged chunk or payload, the group's
// own error when a peer is lost meanwhile.
absl::StatusOr<std::optional<checkpoint::CheckpointContents>> ShareTrainingState(
    comm::ProcessGroup& group, const HealOptions& options, const checkpoint::CheckpointContents* mine);

// The framing, exposed for tests: a chunk message is its index (int64), the
// payload's CRC32 and length (uint32 each), then the payload (trailing
// bytes after it are ignored: broadcasts move whole float32 words).
// DataLoss naming `source_rank` and the index when the message is not
// chunk `index`, is cut short, or its payload does not match its CRC32.
std::string FrameHealChunk(int64_t index, absl::string_view payload);
absl::StatusOr<absl::string_view> OpenHealChunk(absl::string_view message, int64_t index, int source_rank);

}  // namespace psync::control
