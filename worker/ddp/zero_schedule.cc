#include "worker/ddp/zero_schedule.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "psync/autograd/node.h"

namespace psync::ddp {
namespace {

using ParamIndex = std::unordered_map<const autograd::VariableState*, size_t>;

// Collects the parameter indices of `m`'s sub-tree into out[&m] (and of every descendant).
const std::vector<size_t>& CollectParams(const nn::Module& m, const ParamIndex& index,
                                         std::unordered_map<const nn::Module*, std::vector<size_t>>* out) {
  std::vector<size_t> mine;
  for (const auto& [name, p] : m.own_parameters()) {
    auto it = index.find(p.state().get());
    if (it != index.end()) mine.push_back(it->second);
  }
  for (const auto& [name, child] : m.children()) {
    const std::vector<size_t>& theirs = CollectParams(*child, index, out);
    mine.insert(mine.end(), theirs.begin(), theirs.end());
  }
  std::vector<size_t>& slot = (*out)[&m];
  slot = std::move(mine);
  return slot;
}

}  // namespace

ZeroSchedule::ZeroSchedule(ZeroParameters& memory, const nn::Module& root,
                           const std::vector<autograd::Variable>& params, ZeroScheduleOptions options)
    : memory_(memory), options_(options) {
  ParamIndex index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].state().get()] = i;
  CollectParams(root, index, &module_params_);
}

void ZeroSchedule::SetLayout(const optim::ShardPlan& plan) {
  std::vector<size_t>& bucket_of = bucket_of_;
  bucket_of.clear();
  bucket_size_.assign(plan.buckets.size(), 0);
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    for (size_t i : plan.buckets[b].params) {
      if (bucket_of.size() <= i) bucket_of.resize(i + 1, 0);
      bucket_of[i] = b;
    }
    bucket_size_[b] = plan.buckets[b].params.size();
  }
  remaining_ = bucket_size_;
  module_buckets_.clear();
  for (const auto& [module, params] : module_params_) {
    std::vector<size_t> buckets;
    for (size_t i : params) buckets.push_back(bucket_of[i]);
    std::sort(buckets.begin(), buckets.end());
    buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
    module_buckets_[module] = std::move(buckets);
  }
  pins_.assign(plan.buckets.size(), 0);
  done_.assign(plan.buckets.size(), 0);
  summoned_ = false;
}

const std::vector<size_t>* ZeroSchedule::BucketsOf(const nn::Module& module) const {
  auto it = module_buckets_.find(&module);
  if (it == module_buckets_.end() || it->second.empty()) return nullptr;
  return &it->second;
}

void ZeroSchedule::Need(const std::vector<size_t>& buckets, size_t from, int step) {
  for (size_t b : buckets) memory_.Gather(b);
  // Why prefetch after the demand: the demanded gathers are first in line
  // on the communication thread; the next ones overlap this module's work.
  for (int k = 1; step != 0 && k <= options_.prefetch; ++k) {
    const int64_t b = static_cast<int64_t>(from) + static_cast<int64_t>(step) * k;
    if (b < 0 || b >= static_cast<int64_t>(memory_.num_buckets())) break;
    if (!done_[static_cast<size_t>(b)]) memory_.Gather(static_cast<size_t>(b));
  }
  for (size_t b : buckets) {
    absl::Status st = memory_.Wait(b);
    if (!st.ok()) throw std::runtime_error(st.ToString());
  }
}

void ZeroSchedule::BeforeForward(const nn::Module& module) {
  const std::vector<size_t>* buckets = BucketsOf(module);
  if (!buckets || summoned_) return;
  // A module behind the furthest point of this forward (a tied weight read
  // again, like the GPT's head) prefetches nothing: what lies ahead of it
  // was passed already.
  const bool ahead = buckets->front() <= forward_low_;
  if (ahead) forward_low_ = buckets->front();
  Need(*buckets, buckets->front(), ahead ? -1 : 0);
  for (size_t b : *buckets) ++pins_[b];
}

void ZeroSchedule::AfterForward(const nn::Module& module, const std::vector<autograd::Variable>& outputs) {
  const std::vector<size_t>* buckets = BucketsOf(module);
  if (!buckets || summoned_) return;
  for (size_t b : *buckets) --pins_[b];
  if (options_.reshard_after_forward) {
    // Behind this module in forward's direction, and pinned by nobody: done
    // until backward. (Release errors are a failed gather, already returned
    // by the Wait that preceded this forward.)
    for (size_t b = buckets->front() + 1; b < memory_.num_buckets(); ++b) {
      if (pins_[b] == 0 && memory_.resident(b)) (void)memory_.Release(b);
    }
  }
  std::weak_ptr<ZeroSchedule> self = weak_from_this();
  const std::vector<size_t> mine = *buckets;
  for (const autograd::Variable& out : outputs) {
    if (!out.defined() || !out.grad_fn()) continue;
    // Why on the outputs' nodes: backward reaches this module's computation
    // only through them, so their pre-hook runs before any of its nodes.
    out.grad_fn()->AddPreHook([self, mine](const autograd::TensorList& grads) {
      if (auto s = self.lock()) s->BeforeBackward(mine);
      return grads;
    });
  }
}

void ZeroSchedule::BeforeBackward(const std::vector<size_t>& buckets) {
  if (summoned_) return;
  for (size_t b : buckets) {
    if (b >= memory_.num_buckets()) {
      throw std::runtime_error("--zero=3: a backward of a forward run before the bucket layout changed");
    }
  }
  // A bucket whose gradients all arrived is read by no node any more (the
  // outputs of a scope such as a transformer block reach backward at
  // several nodes; the later ones find part of it done).
  std::vector<size_t> needed;
  for (size_t b : buckets) {
    if (!done_[b]) needed.push_back(b);
  }
  if (!needed.empty()) Need(needed, needed.back(), +1);
}

void ZeroSchedule::ParameterDone(size_t i) {
  if (i >= bucket_of_.size()) return;
  const size_t b = bucket_of_[i];
  if (remaining_[b] == 0 || --remaining_[b] != 0) return;
  if (summoned_ || pins_[b] != 0) return;
  done_[b] = 1;
  // Every gradient of the bucket arrived, so every node reading its values ran.
  (void)memory_.Release(b);
}

absl::Status ZeroSchedule::ReleaseAll() {
  summoned_ = false;
  std::fill(pins_.begin(), pins_.end(), 0);
  std::fill(done_.begin(), done_.end(), 0);
  remaining_ = bucket_size_;
  forward_low_ = SIZE_MAX;
  return memory_.ReleaseAll();
}

absl::Status ZeroSchedule::Summon() {
  absl::Status st = memory_.GatherAll();
  summoned_ = st.ok();
  return st;
}

}  // namespace psync::ddp
