#include "worker/control/heal.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/crc32c.h"
#include "psync/common/exit_code.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "worker/checkpoint/format.h"
#include "worker/checkpoint/training_state.h"
#include "worker/control/heal_header.h"

namespace psync::control {
namespace {

std::string From(int source) { return absl::StrCat("rank ", source, "'s training state"); }

// The bytes of `slice` inside `t` (a contiguous CPU tensor).
char* SliceBytes(const Tensor& t, const HealSlice& s) { return static_cast<char*>(t.raw_data()) + s.offset; }

// A direct piece's window of its tensor, in whole elements.
Tensor Window(const Tensor& t, const HealSlice& s) {
  const size_t elem = ElementSize(t.dtype());
  return t.View(static_cast<int64_t>(s.offset / elem), {static_cast<int64_t>(s.bytes / elem)});
}

uint32_t PieceCrc(const HealPiece& p, const std::vector<Tensor>& tensors) {
  uint32_t crc = 0;
  for (const HealSlice& s : p.slices) crc = Crc32c(SliceBytes(tensors[s.entry], s), s.bytes, crc);
  return crc;
}

// The source's side: its tensors on the host (handles, unless they live on
// a device), the header describing them and each piece's CRC.
struct Outgoing {
  HealHeader header;
  std::vector<Tensor> tensors;  // header.entries' order
};

absl::StatusOr<Outgoing> Describe(const checkpoint::CheckpointContents& mine, size_t chunk_bytes) {
  Outgoing out;
  PSYNC_ASSIGN_OR_RETURN(out.header.metadata, checkpoint::EncodeManifest(mine.manifest));
  out.header.chunk_bytes = chunk_bytes;
  auto add = [&](std::string name, const Tensor& t) {
    return RunCatching(absl::StrCat("healing: reading tensor '", name, "'"), [&] {
      out.tensors.push_back(t.To(Device::CPU()).Contiguous());  // the same handle for a contiguous CPU tensor
      out.header.entries.push_back(HealEntry{std::move(name), t.dtype(), t.shape()});
    });
  };
  for (const auto& [name, t] : mine.params) PSYNC_RETURN_IF_ERROR(add(name, t));
  for (const auto& [key, t] : mine.optimizer_state) {
    PSYNC_RETURN_IF_ERROR(add(absl::StrCat(checkpoint::kOptimizerPrefix, key), t));
  }
  for (const HealPiece& p : PlanHealPieces(out.header.entries, chunk_bytes)) {
    out.header.crcs.push_back(PieceCrc(p, out.tensors));
  }
  return out;
}

// A receiver's destinations: `into`'s tensor of the same name where it
// fits (a contiguous CPU tensor of the same dtype and shape), else a new one.
std::vector<Tensor> Destinations(const HealHeader& h, const checkpoint::CheckpointContents* into) {
  std::map<std::string, const Tensor*> mine;
  if (into != nullptr) {
    for (const auto& [name, t] : into->params) mine.emplace(name, &t);
    for (const auto& [key, t] : into->optimizer_state) mine.emplace(absl::StrCat(checkpoint::kOptimizerPrefix, key), &t);
  }
  std::vector<Tensor> out;
  for (const HealEntry& e : h.entries) {
    auto it = mine.find(e.name);
    const Tensor* t = it == mine.end() ? nullptr : it->second;
    const bool fits = t != nullptr && t->defined() && t->device().is_cpu() && t->is_contiguous() &&
                      t->dtype() == e.dtype && t->shape() == e.shape;
    out.push_back(fits ? *t : Tensor::Empty(e.shape, e.dtype));
  }
  return out;
}

absl::StatusOr<checkpoint::CheckpointContents> Assemble(const HealHeader& h, std::vector<Tensor> tensors, int source) {
  checkpoint::CheckpointContents out;
  PSYNC_ASSIGN_OR_RETURN(out.manifest, checkpoint::DecodeManifest(h.metadata, From(source)));
  for (size_t i = 0; i < h.entries.size(); ++i) {
    absl::string_view key = h.entries[i].name;
    if (absl::ConsumePrefix(&key, checkpoint::kOptimizerPrefix)) {
      out.optimizer_state.emplace_back(std::string(key), std::move(tensors[i]));
    } else {
      out.params.emplace_back(h.entries[i].name, std::move(tensors[i]));
    }
  }
  return out;
}

// The source's header; every rank takes part in the all-gather (the others
// send nothing).
absl::StatusOr<std::string> HeaderFromSource(comm::ProcessGroup& group, const std::string& mine, const HealOptions& o) {
  absl::StatusOr<std::vector<std::string>> all = group.AllgatherBytes(mine, o.timeout);
  if (!all.ok()) return Annotate(all.status(), absl::StrCat("receiving ", From(o.source), " (its header)"));
  if (static_cast<int>(all->size()) != group.size()) {
    return absl::InternalError(absl::StrCat("all-gather returned ", all->size(), " parts for ", group.size(), " ranks"));
  }
  return std::move((*all)[static_cast<size_t>(o.source)]);
}

// Every piece, one broadcast each. The source reads `tensors`, the others
// write them. Damage is returned once every piece has arrived (the ranks
// stay in step); a failed broadcast at once.
absl::Status MovePieces(comm::ProcessGroup& group, const HealOptions& o, const HealHeader& h,
                        const std::vector<Tensor>& tensors) {
  const bool sending = group.rank() == o.source;
  const std::vector<HealPiece> pieces = PlanHealPieces(h.entries, h.chunk_bytes);
  size_t staged = 0;
  for (const HealPiece& p : pieces) staged = std::max(staged, p.packed ? p.bytes : 0);
  auto words = [](size_t bytes) { return static_cast<int64_t>((bytes + 3) / 4); };
  // One buffer for every packed piece (float32 words: a broadcast moves bytes).
  const Tensor staging = staged > 0 ? Tensor::Empty({words(staged)}, kFloat32) : Tensor();
  absl::Status damage;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const HealPiece& p = pieces[k];
    const Tensor view = p.packed ? staging.View(0, {words(p.bytes)}) : Window(tensors[p.slices[0].entry], p.slices[0]);
    char* at = static_cast<char*>(view.raw_data());
    if (sending && p.packed) {
      for (const HealSlice& s : p.slices) at = std::copy_n(SliceBytes(tensors[s.entry], s), s.bytes, at);
    }
    absl::Status st = group.Broadcast(view, o.source, absl::StrCat("heal piece ", k))->Wait(o.timeout);
    if (!st.ok()) {
      return Annotate(st, absl::StrCat("receiving ", From(o.source), " (", DescribeHealPiece(h, pieces, k), ")"));
    }
    if (sending) continue;
    if (Crc32c(view.raw_data(), p.bytes) != h.crcs[k]) {
      if (damage.ok()) {
        damage = absl::DataLossError(absl::StrCat(From(o.source), ": ", DescribeHealPiece(h, pieces, k),
                                                  " does not match its CRC-32C"));
      }
      continue;
    }
    if (!p.packed) continue;
    at = static_cast<char*>(view.raw_data());
    for (const HealSlice& s : p.slices) {
      std::memcpy(SliceBytes(tensors[s.entry], s), at, s.bytes);
      at += s.bytes;
    }
  }
  return damage;
}

}  // namespace

absl::StatusOr<std::optional<checkpoint::CheckpointContents>> ShareTrainingState(
    comm::ProcessGroup& group, const HealOptions& o, const checkpoint::CheckpointContents* mine,
    const checkpoint::CheckpointContents* into) {
  if (o.source < 0 || o.source >= group.size() || o.chunk_bytes < kMinHealChunk) {
    return absl::InvalidArgumentError(absl::StrCat("healing: source rank ", o.source, " of ", group.size(),
                                                   " ranks, chunks of ", o.chunk_bytes, " bytes (at least ",
                                                   kMinHealChunk, ")"));
  }
  const bool sending = group.rank() == o.source;
  Outgoing out;
  std::string header;
  if (sending) {
    if (mine == nullptr) return absl::InvalidArgumentError("healing: the source rank has no state to send");
    PSYNC_ASSIGN_OR_RETURN(out, Describe(*mine, o.chunk_bytes));
    header = EncodeHealHeader(out.header);
  }
  PSYNC_ASSIGN_OR_RETURN(const std::string header_in, HeaderFromSource(group, header, o));
  if (sending) {
    PSYNC_RETURN_IF_ERROR(MovePieces(group, o, out.header, out.tensors));
    return std::nullopt;
  }
  PSYNC_ASSIGN_OR_RETURN(const HealHeader h, DecodeHealHeader(header_in, From(o.source)));
  std::vector<Tensor> tensors = Destinations(h, into);
  PSYNC_RETURN_IF_ERROR(MovePieces(group, o, h, tensors));
  PSYNC_ASSIGN_OR_RETURN(checkpoint::CheckpointContents state, Assemble(h, std::move(tensors), o.source));
  return std::optional<checkpoint::CheckpointContents>(std::move(state));
}

absl::Status HealTrainingState(comm::ProcessGroup& group, const HealOptions& o, std::optional<int64_t> held_step,
                               const optim::NamedParams& params, optim::Optimizer& optimizer,
                               const checkpoint::CheckpointManifest& manifest) {
  const int rank = group.rank();
  const std::string what =
      absl::StrCat("rank ", rank, ": healing from rank ", o.source, " at step ", manifest.step);
  // The source's own state goes out; a rank with nothing to lose (a fresh
  // process) or holding the same step (the same bits) receives straight into
  // its live tensors; one with another step's state keeps it until the
  // whole transfer checked out.
  std::optional<checkpoint::CheckpointContents> mine, into;
  if (rank == o.source || !held_step || *held_step == manifest.step) {
    absl::StatusOr<NamedTensors> state = optimizer.CheckpointState(/*keep=*/true);
    if (!state.ok()) return absl::Status(state.status().code(), absl::StrCat(what, ": ", state.status().message()));
    (rank == o.source ? mine : into) =
        checkpoint::CaptureTrainingState(params, optimizer.name(), std::move(*state), manifest);
  }
  absl::StatusOr<std::optional<checkpoint::CheckpointContents>> got =
      ShareTrainingState(group, o, mine ? &*mine : nullptr, into ? &*into : nullptr);
  if (!got.ok()) {
    return WithExitCode(absl::Status(got.status().code(), absl::StrCat(what, ": ", got.status().message())),
                        got.status().code() == absl::StatusCode::kDataLoss ? kExitInternal : kExitPeerLost);
  }
  if (!got->has_value()) return absl::OkStatus();  // the source keeps its own
  const checkpoint::CheckpointContents& c = **got;
  const std::string source = absl::StrCat("the state of rank ", o.source);
  auto failed = [&](absl::string_view why) {
    return WithExitCode(absl::InternalError(absl::StrCat(what, ": ", why)), kExitInternal);
  };
  if (c.manifest.step != manifest.step) return failed(absl::StrCat("the state received is at step ", c.manifest.step));
  if (c.manifest.model != manifest.model) {
    return failed(absl::StrCat("the state received is of model ", c.manifest.model, ", this rank trains ",
                               manifest.model));
  }
  if (absl::Status st = checkpoint::LoadParameters(c, source, params); !st.ok()) return failed(st.message());
  if (absl::Status st = checkpoint::LoadOptimizerState(c, source, optimizer); !st.ok()) return failed(st.message());
  return absl::OkStatus();
}

}  // namespace psync::control
