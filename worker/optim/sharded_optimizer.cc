#include "worker/optim/sharded_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"
#include "psync/tensor/ops.h"

namespace psync::optim {

namespace {

Tensor Slice1d(const Tensor& t, int64_t offset, int64_t length) { return t.Flatten().View(offset, {length}); }

}  // namespace

absl::StatusOr<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::Create(NamedParams params,
                                                                          std::unique_ptr<UpdateRule> rule) {
  if (!rule) return absl::InvalidArgumentError("sharded optimizer: no update rule");
  if (absl::Status st = ValidateParams(params); !st.ok()) return st;
  return std::unique_ptr<ShardedOptimizer>(new ShardedOptimizer(std::move(params), std::move(rule)));
}

ShardedOptimizer::ShardedOptimizer(NamedParams params, std::unique_ptr<UpdateRule> rule)
    : Optimizer(std::move(params)), rule_(std::move(rule)), buffer_names_(rule_->buffers()) {}

absl::Status ShardedOptimizer::Attach(std::shared_ptr<GradientShards> shards) {
  if (!shards) return absl::InvalidArgumentError("sharded optimizer: no gradient shards to attach to");
  const std::vector<autograd::Variable>& theirs = shards->parameters();
  if (theirs.size() != params_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("sharded optimizer: ", params_.size(),
                                                   " parameters, but the data-parallel layer shards ", theirs.size()));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (theirs[i].state() != params_[i].second.state()) {
      return absl::InvalidArgumentError(absl::StrCat("sharded optimizer: parameter ", i, " ('", params_[i].first,
                                                     "') is not the data-parallel layer's parameter ", i));
    }
  }
  shards_ = std::move(shards);
  absl::Status st = RunCatching("sharded optimizer: making the state of this rank's shards", [&] {
    Layout(shards_->plan());
  });
  if (!st.ok()) return st;
  version_ = shards_->version();
  if (pending_.empty()) {
    // A fresh state (zero moments): its replica is whole from the start.
    return FillReplicas({});
  }
  NamedTensors full = std::move(pending_);
  pending_.clear();
  return Slice(full);
}

void ShardedOptimizer::Layout(const ShardPlan& plan) {
  plan_ = plan;
  segments_.assign(plan.buckets.size(), {});
  state_.assign(plan.buckets.size(), {});
  std::vector<DType> dtypes;
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const FlatBucket& fb = plan.buckets[b];
    const int64_t s = plan.shard(b);
    segments_[b] = SegmentsOf(fb, s, plan.rank);
    dtypes.push_back(fb.params.empty() ? kFloat32 : params_[fb.params.front()].second.data().dtype());
    if (fb.params.empty()) continue;
    const Tensor& like = params_[fb.params.front()].second.data();
    for (size_t k = 0; k < buffer_names_.size(); ++k) state_[b].push_back(Tensor::Zeros({s}, like.dtype(), like.device()));
  }
  records_.Reset(plan, buffer_names_.size(), dtypes, replica_distance_, replica_copies_);
}

std::vector<ShardedOptimizer::Segment> ShardedOptimizer::SegmentsOf(const FlatBucket& fb, int64_t shard,
                                                                    int rank) const {
  std::vector<Segment> out;
  const int64_t lo = static_cast<int64_t>(rank) * shard, hi = lo + shard;
  for (size_t k = 0; k < fb.params.size(); ++k) {
    const size_t i = fb.params[k];
    const int64_t begin = fb.offsets[k], end = begin + params_[i].second.data().numel();
    const int64_t a = std::max(begin, lo), e = std::min(end, hi);
    if (a < e) out.push_back(Segment{i, a - begin, a - lo, e - a});
  }
  return out;
}

void ShardedOptimizer::RefillReplicas(const std::map<std::string, const Tensor*>& given) {
  records_.Refill(step_, [&](size_t b, int owner, Tensor& record) {
    const FlatBucket& fb = plan_.buckets[b];
    const int64_t s = plan_.shard(b);
    ops::Copy(ShardRecords::Part(record, s, 0), shards_->ParamBuffer(b).View(static_cast<int64_t>(owner) * s, {s}));
    for (size_t k = 0; k < buffer_names_.size(); ++k) {
      Tensor part = ShardRecords::Part(record, s, k + 1);
      ops::Fill(part, 0.0);  // the padding, and everything of a fresh state
      for (const Segment& seg : SegmentsOf(fb, s, owner)) {
        auto it = given.find(absl::StrCat(params_[seg.param].first, ".", buffer_names_[k]));
        if (it == given.end()) continue;
        ops::Copy(part.View(seg.shard_offset, {seg.length}), Slice1d(*it->second, seg.param_offset, seg.length));
      }
    }
  });
}

Tensor ShardedOptimizer::MasterSlice(size_t b, const Segment& seg) const {
  // The parameter's elements in this rank's shard (ZeRO-3: the shard is all
  // this rank keeps of them).
  return OwnParams(b).View(seg.shard_offset, {seg.length});
}

absl::Status ShardedOptimizer::Gathered() {
  // The last step's parameter gathers (normally done: the forward waited),
  // and its replica shifts (issued before them).
  absl::Status st = shards_->WaitParameters();
  absl::Status shifted = records_.WaitShifts(shards_->timeout());
  if (st.ok()) st = shifted;
  return Annotate(st, absl::StrCat(name(), " (sharded): gathering the updated parameters"));
}

bool ShardedOptimizer::ParamsSharded() const {
  return shards_ != nullptr && !shards_->plan().buckets.empty() && !shards_->ParamBuffer(0).defined();
}

absl::Status ShardedOptimizer::FillReplicas(const std::map<std::string, const Tensor*>& given) {
  if (ParamsSharded()) return ShiftReplicas();
  return RunCatching("sharded optimizer: the replicas of this layout", [&] { RefillReplicas(given); });
}

absl::Status ShardedOptimizer::ShiftReplicas() {
  if (!records_.enabled()) return absl::OkStatus();
  absl::Status st = RunCatching("sharded optimizer: the replicas of this layout", [&] {
    for (size_t b = 0; b < state_.size(); ++b) records_.Shift(shards_->group(), b, OwnParams(b), state_[b], step_);
  });
  absl::Status shifted = records_.WaitShifts(shards_->timeout());
  if (st.ok()) st = Annotate(shifted, "sharded optimizer: sending this rank's shard to its replica holders");
  return st;
}

bool ShardedOptimizer::LastStepWhole() {
  if (!shards_) return true;  // nothing in flight: the state is as loaded
  const bool waited = Gathered().ok();
  return waited && shards_->ParametersWhole() && records_.Replicated(step_);
}

absl::Status ShardedOptimizer::Step(double lr) {
  if (!shards_) return absl::FailedPreconditionError("sharded optimizer: Step before Attach");
  PSYNC_RETURN_IF_ERROR(Gathered());
  if (shards_->version() != version_) PSYNC_RETURN_IF_ERROR(Reshard());
  if (records_.enabled()) {
    // Live recovery: the step the ranks may have to go back to together.
    absl::Status st = RunCatching("sharded optimizer: keeping the previous step's shard", [&] {
      for (size_t b = 0; b < state_.size(); ++b) records_.KeepPrevious(b, OwnParams(b), state_[b], step_);
    });
    if (!st.ok()) return st;
    prev_steps_ = steps_;
  }
  // Every rank knows which parameters got a gradient: the counts stay replicated.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (shards_->HasGrad(i)) ++steps_[i];
  }
  for (size_t b = 0; b < segments_.size(); ++b) {
    const Tensor grad = shards_->GradShard(b);
    // A bucket nobody reduced (every parameter unused everywhere): nothing
    // changed, nothing to gather (its replica is still sent, below).
    if (grad.defined()) PSYNC_RETURN_IF_ERROR(UpdateBucket(b, grad, lr));
    // Why the replica goes first: a rank's gathers completing means every
    // rank issued its gathers, hence finished its shifts (shard_records.h).
    if (records_.enabled()) {
      records_.Shift(shards_->group(), b, OwnParams(b), state_[b], step_ + 1);
    } else if (grad.defined()) {
      // Why launched here: the gather of this bucket overlaps the update of
      // the next one, and the last ones whatever runs before the next forward
      // (which waits for them).
      shards_->GatherParameters(b);
    }
  }
  ++step_;
  if (records_.enabled()) {
    for (size_t b = 0; b < segments_.size(); ++b) {
      if (shards_->GradShard(b).defined()) shards_->GatherParameters(b);
    }
  }
  return absl::OkStatus();
}

absl::Status ShardedOptimizer::UpdateBucket(size_t b, const Tensor& grad, double lr) {
  for (const Segment& seg : segments_[b]) {
    if (!shards_->HasGrad(seg.param)) continue;
    std::vector<Tensor> bufs;
    for (const Tensor& t : state_[b]) bufs.push_back(t.View(seg.shard_offset, {seg.length}));
    try {
      rule_->Apply(MasterSlice(b, seg), grad.View(seg.shard_offset, {seg.length}), bufs,
                   ParamStep{params_[seg.param].second.data().dim(), steps_[seg.param]}, lr);
    } catch (const TensorError& e) {
      (void)Gathered();
      return ParamError(seg.param, e, /*internal=*/false);
    } catch (const InternalError& e) {
      (void)Gathered();
      return ParamError(seg.param, e, /*internal=*/true);
    }
  }
  return absl::OkStatus();
}

Tensor ShardedOptimizer::OwnParams(size_t b) const { return shards_->OwnParamShard(b); }

absl::StatusOr<double> ShardedOptimizer::ClipGradNorm(double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(max_norm)) {
    return absl::InvalidArgumentError(absl::StrCat("--clip-grad-norm must be a finite value > 0, got ", max_norm));
  }
  if (!shards_) return absl::FailedPreconditionError("sharded optimizer: ClipGradNorm before Attach");
  PSYNC_RETURN_IF_ERROR(Gathered());
  if (shards_->version() != version_) PSYNC_RETURN_IF_ERROR(Reshard());
  // This rank's partial sum: its segments' sums of squares (ops::SumOfSquares,
  // as clip.h), added in bucket and segment order.
  std::vector<std::pair<size_t, const Segment*>> used;
  for (size_t b = 0; b < segments_.size(); ++b) {
    if (!shards_->GradShard(b).defined()) continue;
    for (const Segment& seg : segments_[b]) {
      if (shards_->HasGrad(seg.param)) used.emplace_back(b, &seg);
    }
  }
  double mine = 0;
  absl::Status st = RunCatching("gradient norm (sharded)", [&] {
    if (used.empty()) return;
    const Device device = shards_->GradShard(used.front().first).device();
    Tensor sums = Tensor::Empty({static_cast<int64_t>(used.size())}, kFloat64, device);
    for (size_t k = 0; k < used.size(); ++k) {
      const Segment& seg = *used[k].second;
      ops::SumOfSquaresInto(sums.View(static_cast<int64_t>(k), {}),
                            shards_->GradShard(used[k].first).View(seg.shard_offset, {seg.length}));
    }
    for (double v : sums.ToVector<double>()) mine += v;
  });
  if (!st.ok()) return st;
  // Combined in rank order on every rank: every rank gets the same norm.
  std::string bytes(sizeof(double), '\0');
  std::memcpy(bytes.data(), &mine, sizeof(double));
  absl::StatusOr<std::vector<std::string>> all = shards_->group().AllgatherBytes(bytes, shards_->timeout());
  if (!all.ok()) return Annotate(all.status(), "gradient norm (sharded): combining the ranks' partial sums");
  double total = 0;
  for (const std::string& b : *all) {
    double v = 0;
    if (b.size() != sizeof(double)) return absl::InternalError("gradient norm (sharded): malformed partial sum");
    std::memcpy(&v, b.data(), sizeof(double));
    total += v;
  }
  const double norm = std::sqrt(total);
  const double coef = max_norm / (norm + 1e-6);
  // As clip.h: a NaN/inf norm poisons the gradients, as in torch.
  if (!(coef < 1.0) && !std::isnan(coef)) return norm;
  const float scale = static_cast<float>(coef);
  st = RunCatching("gradient clipping (sharded)", [&] {
    for (const auto& [b, seg] : used) {
      ops::ScaleInPlace(shards_->GradShard(b).View(seg->shard_offset, {seg->length}), scale);
    }
  });
  if (!st.ok()) return st;
  return norm;
}

std::vector<Optimizer::StateEntry> ShardedOptimizer::FullEntries() const {
  std::vector<StateEntry> out;
  for (const auto& [name, p] : params_) {
    out.push_back(StateEntry{absl::StrCat(name, ".step"), {}, kInt64});
    for (const std::string& buf : buffer_names_) {
      out.push_back(StateEntry{absl::StrCat(name, ".", buf), p.data().shape(), p.data().dtype()});
    }
  }
  return out;
}

absl::StatusOr<NamedTensors> ShardedOptimizer::CheckpointState(bool keep) {
  if (!shards_) {
    return absl::FailedPreconditionError("sharded optimizer: CheckpointState before Attach");
  }
  PSYNC_RETURN_IF_ERROR(Gathered());
  // Per parameter and buffer: the whole tensor (on the CPU), filled bucket
  // by bucket from an all-gather of every rank's shard.
  std::vector<std::vector<Tensor>> full(params_.size());
  absl::Status st = RunCatching("gathering the sharded optimizer state", [&] {
    if (!keep) return;
    for (size_t i = 0; i < params_.size(); ++i) {
      for (size_t k = 0; k < buffer_names_.size(); ++k) {
        full[i].push_back(Tensor::Zeros(params_[i].second.data().shape(), params_[i].second.data().dtype()));
      }
    }
  });
  if (!st.ok()) return st;
  comm::ProcessGroup& group = shards_->group();
  for (size_t b = 0; b < plan_.buckets.size(); ++b) {
    const FlatBucket& fb = plan_.buckets[b];
    for (size_t k = 0; k < state_[b].size(); ++k) {
      Tensor flat;
      const int64_t s = plan_.shard(b);
      st = RunCatching("gathering the sharded optimizer state", [&] {
        flat = Tensor::Zeros({fb.padded}, state_[b][k].dtype(), state_[b][k].device());
        ops::Copy(flat.View(static_cast<int64_t>(plan_.rank) * s, {s}), state_[b][k]);
      });
      if (!st.ok()) return st;
      st = group.Allgather(flat, absl::StrCat("optimizer state ", buffer_names_[k], " of bucket ", b))
               ->Wait(shards_->timeout());
      if (!st.ok()) return Annotate(st, absl::StrCat(name(), " (sharded): gathering the state for a checkpoint"));
      if (!keep) continue;
      st = RunCatching("gathering the sharded optimizer state", [&] {
        for (size_t j = 0; j < fb.params.size(); ++j) {
          const size_t i = fb.params[j];
          Tensor& dst = full[i][k];
          ops::Copy(dst, flat.View(fb.offsets[j], dst.shape()));
        }
      });
      if (!st.ok()) return st;
    }
  }
  NamedTensors out;
  if (!keep) return out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back(absl::StrCat(params_[i].first, ".step"), Tensor::FromVector(std::vector<int64_t>{steps_[i]}, {}));
    for (size_t k = 0; k < buffer_names_.size(); ++k) {
      out.emplace_back(absl::StrCat(params_[i].first, ".", buffer_names_[k]), full[i][k]);
    }
  }
  return out;
}

absl::Status ShardedOptimizer::LoadCheckpointState(const NamedTensors& state) {
  absl::StatusOr<std::map<std::string, const Tensor*>> matched = MatchState(FullEntries(), state);
  if (!matched.ok()) return matched.status();
  if (!shards_) {
    // Before Attach (--resume runs before the job is joined): keep it whole
    // until the layout is known.
    for (size_t i = 0; i < params_.size(); ++i) {
      steps_[i] = matched->at(absl::StrCat(params_[i].first, ".step"))->To(Device::CPU()).Item<int64_t>();
    }
    pending_ = state;
    return absl::OkStatus();
  }
  return Slice(state);
}

absl::Status ShardedOptimizer::Slice(const NamedTensors& full) {
  absl::StatusOr<std::map<std::string, const Tensor*>> matched = MatchState(FullEntries(), full);
  if (!matched.ok()) return matched.status();
  const std::map<std::string, const Tensor*>& given = *matched;
  absl::Status st = RunCatching(absl::StrCat(name(), " state: copying this rank's slices"), [&] {
    for (size_t i = 0; i < params_.size(); ++i) {
      steps_[i] = given.at(absl::StrCat(params_[i].first, ".step"))->To(Device::CPU()).Item<int64_t>();
    }
    for (size_t b = 0; b < segments_.size(); ++b) {
      for (const Segment& seg : segments_[b]) {
        for (size_t k = 0; k < buffer_names_.size(); ++k) {
          const Tensor& whole = *given.at(absl::StrCat(params_[seg.param].first, ".", buffer_names_[k]));
          ops::Copy(state_[b][k].View(seg.shard_offset, {seg.length}), Slice1d(whole, seg.param_offset, seg.length));
        }
      }
    }
  });
  if (st.ok()) st = FillReplicas(given);
  return st;
}

absl::Status ShardedOptimizer::Reshard() {
  // Why gather it whole: the new owners of an element can be any rank; this
  // happens once per bucket plan (at the start of a run).
  absl::StatusOr<NamedTensors> full = CheckpointState(/*keep=*/true);
  if (!full.ok()) return Annotate(full.status(), "sharded optimizer: moving the state to a new bucket layout");
  absl::Status st = RunCatching("sharded optimizer: the state of the new layout", [&] { Layout(shards_->plan()); });
  if (!st.ok()) return st;
  version_ = shards_->version();
  return Slice(*full);
}

int64_t ShardedOptimizer::state_bytes() const {
  // The live-recovery copies count: they are optimizer state this rank holds.
  int64_t bytes = static_cast<int64_t>(params_.size() * sizeof(int64_t)) + records_.bytes();
  for (const auto& per_bucket : state_) {
    for (const Tensor& t : per_bucket) bytes += static_cast<int64_t>(t.nbytes());
  }
  return bytes;
}

}  // namespace psync::optim
