// ShardedOptimizer::Recover (sharded_optimizer.h): the whole state of a
// step rebuilt, over a new generation's group, from the shards and replicas
// the survivors hold (shard_records.h).
//
// 1. Every member says what it holds (an all-gather of short headers):
//    nothing (a replacement), shards of a layout (the survivors: the world
//    and rank it had, whether its own record is at the step, whose replicas
//    it keeps at it, the step counts), or the whole state (a member whose earlier
//    Recover succeeded, before a later loss stopped its Attach).
// 2. A member with the whole state broadcasts it. Otherwise, for every
//    shard of the survivors' layout, its owner (live or previous record) or
//    else a holder of a replica of it broadcasts that record, bucket by
//    bucket; every member writes it into whole tensors.
// 3. Every member writes the parameters and keeps the optimizer state
//    whole, for the next Attach to slice.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "psync/tensor/ops.h"
#include "worker/optim/sharded_optimizer.h"

namespace psync::optim {

struct ShardedOptimizer::RecoveryHeader {
  enum Kind : int64_t { kNothing = 0, kShards = 1, kWhole = 2 };
  int64_t kind = kNothing;
  int64_t world = 0, rank = -1;
  bool own = false;
  std::vector<int64_t> replicas;  // the ranks whose shard it holds at the step
  std::vector<int64_t> counts;  // per parameter, at the step (with `own`)
  std::vector<int64_t> plan;    // the layout: buckets, then per bucket padded, n, (param, offset) x n
};

namespace {

using Header = std::vector<int64_t>;

std::string Bytes(const Header& words) {
  std::string out(words.size() * sizeof(int64_t), '\0');
  if (!words.empty()) std::memcpy(out.data(), words.data(), out.size());
  return out;
}

std::vector<int64_t> EncodePlan(const ShardPlan& plan) {
  std::vector<int64_t> out{static_cast<int64_t>(plan.buckets.size())};
  for (const FlatBucket& fb : plan.buckets) {
    out.push_back(fb.padded);
    out.push_back(static_cast<int64_t>(fb.params.size()));
    for (size_t k = 0; k < fb.params.size(); ++k) {
      out.push_back(static_cast<int64_t>(fb.params[k]));
      out.push_back(fb.offsets[k]);
    }
  }
  return out;
}

absl::StatusOr<ShardPlan> DecodePlan(const std::vector<int64_t>& w, int world, size_t nparams) {
  ShardPlan plan;
  plan.world = world;
  size_t i = 0;
  auto next = [&](int64_t lo, int64_t hi) -> absl::StatusOr<int64_t> {
    if (i >= w.size() || w[i] < lo || w[i] > hi) return absl::DataLossError("malformed bucket layout");
    return w[i++];
  };
  PSYNC_ASSIGN_OR_RETURN(int64_t buckets, next(0, static_cast<int64_t>(nparams) + 1));
  for (int64_t b = 0; b < buckets; ++b) {
    FlatBucket fb;
    PSYNC_ASSIGN_OR_RETURN(fb.padded, next(0, INT64_MAX / 2));
    PSYNC_ASSIGN_OR_RETURN(int64_t n, next(0, static_cast<int64_t>(nparams)));
    for (int64_t k = 0; k < n; ++k) {
      PSYNC_ASSIGN_OR_RETURN(int64_t param, next(0, static_cast<int64_t>(nparams) - 1));
      PSYNC_ASSIGN_OR_RETURN(int64_t offset, next(0, fb.padded));
      fb.params.push_back(static_cast<size_t>(param));
      fb.offsets.push_back(offset);
    }
    if (fb.padded % world != 0) return absl::DataLossError("malformed bucket layout (padding)");
    plan.buckets.push_back(std::move(fb));
  }
  if (i != w.size()) return absl::DataLossError("malformed bucket layout (trailing words)");
  return plan;
}

}  // namespace

std::string ShardedOptimizer::EncodeRecoveryHeader(int64_t step) const {
  Header w;
  if (!shards_) {
    // Whole: a state Recover (or a load) left for the next Attach.
    const bool whole = !pending_.empty() && step_ == step;
    w = {whole ? RecoveryHeader::kWhole : RecoveryHeader::kNothing, 0, -1, 0, 0, 0};
    return Bytes(w);
  }
  const bool live = step_ == step;
  const bool own = live || records_.Previous(step) != nullptr;
  std::vector<int64_t> replicas;
  for (int c = 0; c < records_.copies(); ++c) {
    if (records_.Replica(c, step) != nullptr) replicas.push_back(records_.replica_of(c));
  }
  const std::vector<int64_t>& counts = live ? steps_ : prev_steps_;
  w = {RecoveryHeader::kShards, plan_.world, plan_.rank, own, static_cast<int64_t>(replicas.size()),
       own ? static_cast<int64_t>(counts.size()) : 0};
  w.insert(w.end(), replicas.begin(), replicas.end());
  if (own) w.insert(w.end(), counts.begin(), counts.end());
  const std::vector<int64_t> plan = EncodePlan(plan_);
  w.insert(w.end(), plan.begin(), plan.end());
  return Bytes(w);
}

absl::Status ShardedOptimizer::Recover(comm::ProcessGroup& group, int64_t step, std::chrono::milliseconds timeout) {
  absl::StatusOr<std::vector<std::string>> all = group.AllgatherBytes(EncodeRecoveryHeader(step), timeout);
  if (!all.ok()) return Annotate(all.status(), "recovering the sharded optimizer state: exchanging what each rank holds");
  std::vector<RecoveryHeader> headers;
  for (size_t r = 0; r < all->size(); ++r) {
    const std::string& bytes = (*all)[r];
    Header w(bytes.size() / sizeof(int64_t));
    if (bytes.size() % sizeof(int64_t) != 0 || w.size() < 6) {
      return absl::DataLossError(absl::StrCat("recovering the sharded optimizer state: rank ", r, "'s header is malformed"));
    }
    std::memcpy(w.data(), bytes.data(), bytes.size());
    RecoveryHeader h;
    h.kind = w[0];
    h.world = w[1];
    h.rank = w[2];
    h.own = w[3] != 0;
    const int64_t nreplicas = w[4], ncounts = w[5];
    if (nreplicas < 0 || ncounts < 0 || static_cast<size_t>(nreplicas + ncounts) > w.size() - 6) {
      return absl::DataLossError(absl::StrCat("recovering the sharded optimizer state: rank ", r, "'s header is malformed"));
    }
    auto at = w.begin() + 6;
    h.replicas.assign(at, at + nreplicas);
    h.counts.assign(at + nreplicas, at + nreplicas + ncounts);
    h.plan.assign(at + nreplicas + ncounts, w.end());
    headers.push_back(std::move(h));
  }
  for (size_t r = 0; r < headers.size(); ++r) {
    if (headers[r].kind == RecoveryHeader::kWhole) return RecoverFromWhole(group, static_cast<int>(r), step, timeout);
  }
  return RecoverFromShards(group, step, timeout, headers);
}

absl::Status ShardedOptimizer::RecoverFromWhole(comm::ProcessGroup& group, int source, int64_t step,
                                                std::chrono::milliseconds timeout) {
  const bool mine = group.rank() == source;
  std::vector<StateEntry> entries = FullEntries();
  std::map<std::string, const Tensor*> have;
  if (mine) {
    absl::StatusOr<std::map<std::string, const Tensor*>> matched = MatchState(entries, pending_);
    if (!matched.ok()) return matched.status();
    have = *matched;
  }
  std::vector<Tensor> params;
  NamedTensors state;
  absl::Status st = RunCatching("recovering the sharded optimizer state", [&] {
    for (const auto& [name, p] : params_) {
      params.push_back(mine ? p.data().Contiguous() : Tensor::Empty(p.data().shape(), p.data().dtype()));
    }
    for (const StateEntry& e : entries) {
      state.emplace_back(e.key, mine ? have.at(e.key)->To(Device::CPU()).Contiguous() : Tensor::Empty(e.shape, e.dtype));
    }
  });
  if (!st.ok()) return st;
  std::vector<Tensor*> all;
  for (Tensor& t : params) all.push_back(&t);
  for (auto& [name, t] : state) all.push_back(&t);
  for (size_t k = 0; k < all.size(); ++k) {
    st = group.Broadcast(*all[k], source, "recovered optimizer state")->Wait(timeout);
    if (!st.ok()) return Annotate(st, absl::StrCat("recovering the sharded optimizer state from rank ", source));
  }
  return AdoptWhole(params, std::move(state), step);
}

Tensor ShardedOptimizer::RecordAt(size_t b, int owner, int64_t step) const {
  if (!shards_) return Tensor();
  if (owner == plan_.rank && step_ == step) {
    const int64_t s = plan_.shard(b);
    Tensor rec = Tensor::Zeros({static_cast<int64_t>(1 + buffer_names_.size()) * s}, OwnParams(b).dtype());
    ShardRecords::Pack(rec, s, OwnParams(b), state_[b]);
    return rec;
  }
  const std::vector<Tensor>* records = owner == plan_.rank ? records_.Previous(step) : nullptr;
  for (int c = 0; c < records_.copies() && records == nullptr; ++c) {
    if (records_.replica_of(c) == owner) records = records_.Replica(c, step);
  }
  return records ? (*records)[b] : Tensor();
}

absl::Status ShardedOptimizer::RecoverFromShards(comm::ProcessGroup& group, int64_t step,
                                                 std::chrono::milliseconds timeout,
                                                 const std::vector<RecoveryHeader>& headers) {
  const std::string what = absl::StrCat("recovering the sharded optimizer state of step ", step);
  const RecoveryHeader* ref = nullptr;
  for (const RecoveryHeader& h : headers) {
    if (h.kind != RecoveryHeader::kShards) continue;
    if (ref == nullptr) ref = &h;
    if (h.world != ref->world || h.plan != ref->plan) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": the survivors hold shards of different layouts "
                                                              "(worlds ", ref->world, " and ", h.world, ")"));
    }
  }
  if (ref == nullptr || ref->world < 1) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": no rank holds any of it"));
  }
  const int world = static_cast<int>(ref->world);
  absl::StatusOr<ShardPlan> plan = DecodePlan(ref->plan, world, params_.size());
  if (!plan.ok()) return Annotate(plan.status(), what);
  // Who sends each shard: its owner, else the holder of its replica.
  std::vector<int> source(static_cast<size_t>(world), -1);
  const std::vector<int64_t>* counts = nullptr;
  for (int s = 0; s < world; ++s) {
    for (size_t r = 0; r < headers.size() && source[s] < 0; ++r) {
      const RecoveryHeader& h = headers[r];
      if (h.kind == RecoveryHeader::kShards && h.rank == s && h.own) source[s] = static_cast<int>(r);
    }
    for (size_t r = 0; r < headers.size() && source[s] < 0; ++r) {
      const RecoveryHeader& h = headers[r];
      if (h.kind != RecoveryHeader::kShards) continue;
      for (int64_t of : h.replicas) {
        if (of == s && source[s] < 0) source[s] = static_cast<int>(r);
      }
    }
    if (source[s] < 0) {
      return absl::DataLossError(absl::StrCat(what, ": the shard of rank ", s, " of ", world,
                                              " was lost with it and with every rank that kept a copy; the job "
                                              "has to resume from its newest checkpoint"));
    }
    if (headers[source[s]].own && counts == nullptr) counts = &headers[source[s]].counts;
  }
  if (counts == nullptr || counts->size() != params_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": no survivor holds its own shard at that step"));
  }
  std::vector<Tensor> params;
  std::vector<std::vector<Tensor>> bufs(params_.size());
  absl::Status st = RunCatching(what, [&] {
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i].second.data();
      params.push_back(Tensor::Zeros(p.shape(), p.dtype()));
      for (size_t k = 0; k < buffer_names_.size(); ++k) bufs[i].push_back(Tensor::Zeros(p.shape(), p.dtype()));
    }
  });
  if (!st.ok()) return st;
  for (size_t b = 0; b < plan->buckets.size(); ++b) {
    const FlatBucket& fb = plan->buckets[b];
    const int64_t s = plan->shard(b);
    const DType dtype = fb.params.empty() ? kFloat32 : params_[fb.params.front()].second.data().dtype();
    for (int owner = 0; owner < world; ++owner) {
      Tensor rec = source[owner] == group.rank() ? RecordAt(b, owner, step) : Tensor();
      if (!rec.defined()) rec = Tensor::Zeros({static_cast<int64_t>(1 + buffer_names_.size()) * s}, dtype);
      st = group.Broadcast(rec, source[owner], absl::StrCat("recovered shard ", owner, " of bucket ", b))->Wait(timeout);
      if (!st.ok()) return Annotate(st, absl::StrCat(what, ": the shard of rank ", owner, " from rank ", source[owner]));
      st = RunCatching(what, [&] {
        for (const Segment& seg : SegmentsOf(fb, s, owner)) {
          const auto piece = [&](size_t part) { return ShardRecords::Part(rec, s, part).View(seg.shard_offset, {seg.length}); };
          ops::Copy(params[seg.param].Flatten().View(seg.param_offset, {seg.length}), piece(0));
          for (size_t k = 0; k < buffer_names_.size(); ++k) {
            ops::Copy(bufs[seg.param][k].Flatten().View(seg.param_offset, {seg.length}), piece(k + 1));
          }
        }
      });
      if (!st.ok()) return st;
    }
  }
  NamedTensors state;
  for (size_t i = 0; i < params_.size(); ++i) {
    state.emplace_back(absl::StrCat(params_[i].first, ".step"), Tensor::FromVector(std::vector<int64_t>{(*counts)[i]}, {}));
    for (size_t k = 0; k < buffer_names_.size(); ++k) {
      state.emplace_back(absl::StrCat(params_[i].first, ".", buffer_names_[k]), bufs[i][k]);
    }
  }
  return AdoptWhole(params, std::move(state), step);
}

absl::Status ShardedOptimizer::AdoptWhole(const std::vector<Tensor>& params, NamedTensors state, int64_t step) {
  const bool sharded = ParamsSharded();
  absl::Status st = RunCatching("recovering the sharded optimizer state: writing the parameters", [&] {
    for (size_t i = 0; i < params_.size(); ++i) {
      // ZeRO-3: the parameter is a view of its old layout's bucket, which
      // goes with it (below): it becomes the recovered tensor itself, a
      // plain one, as before that DDP existed; the next one shards it again.
      if (sharded) {
        params_[i].second.mutable_data() = params[i];
      } else {
        ops::Copy(params_[i].second.data(), params[i]);
      }
    }
  });
  if (!st.ok()) return st;
  // Detached: the next Attach (the new generation's DDP) slices the state
  // for its layout and refills the replicas from it.
  shards_.reset();
  records_ = ShardRecords{};
  segments_.clear();
  state_.clear();
  step_ = step;
  return LoadCheckpointState(state);
}

}  // namespace psync::optim
