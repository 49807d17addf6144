#include "worker/comm/hier/hier_group.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "psync/common/status_macros.h"
#include "worker/comm/gloo/gloo_group.h"
#include "worker/comm/hier/collectives.h"
#include "worker/comm/shm/spin_policy.h"
#include "worker/comm/util.h"

namespace psync::comm {

namespace {

constexpr std::chrono::milliseconds kStopBound{2000};

absl::StatusOr<std::shared_ptr<ProcessGroup>> CrossGroup(const std::shared_ptr<Store>& store, int host, int hosts,
                                                         int local_rank, const GroupOptions& options) {
  GlooOptions g;
  g.hostname = options.hostname;
  g.iface = options.iface;
  g.timeout = options.timeout;
  g.prefix = absl::StrCat(options.prefix, "/x", local_rank);
  absl::StatusOr<std::unique_ptr<ProcessGroup>> pg = GlooGroup::Create(store, host, hosts, g);
  if (!pg.ok()) return pg.status();
  return std::shared_ptr<ProcessGroup>(std::move(*pg));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> HierGroup::Create(std::shared_ptr<Store> store, int rank, int size,
                                                               const GroupOptions& options) {
  const Topology& topo = options.topology;
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("HierGroup::Create: bad rank ", rank, " of ", size));
  }
  if (!topo.known() || topo.world_size() != size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend 'hier' needs to know which ranks share a host (topology: ", topo.Describe(), ", world size ", size,
        "): set LOCAL_RANK and LOCAL_WORLD_SIZE, or PSYNC_HOST_ID, on every worker"));
  }
  auto parts = std::make_shared<hier::HierParts>();
  parts->topology = topo;
  parts->rank = rank;
  parts->timeout = options.timeout;
  const int host = topo.host_index(rank), hosts = topo.num_hosts(), local_rank = topo.local_rank(rank);

  shm::ShmOptions so;
  so.timeout = options.timeout;
  so.job_tag = options.job_tag;
  so.prefix = absl::StrCat(options.prefix, "/h", host);
  so.slot_bytes = options.shm_slot_bytes;
  so.small_bytes = options.shm_small_bytes;
  PSYNC_ASSIGN_OR_RETURN(so.spin, shm::ResolveSpin(options.shm_spin_us));
  PSYNC_ASSIGN_OR_RETURN(parts->local,
                         shm::ShmContext::Create(store, topo.ranks_on_host(host), local_rank, so));
  // Why sharded only for uniform hosts: shard j must be the same range on
  // every host for the cross-host group of local rank j to add it up.
  parts->sharded = topo.uniform();
  if (parts->sharded || local_rank == 0) {
    absl::StatusOr<std::shared_ptr<ProcessGroup>> cross = CrossGroup(store, host, hosts, local_rank, options);
    if (!cross.ok()) {
      return Annotate(cross.status(), absl::StrCat("hier: cross-host group of local rank ", local_rank));
    }
    parts->cross = *cross;
    if (local_rank == 0) parts->leaders = parts->cross;
    std::vector<int> members;
    for (int h = 0; h < hosts; ++h) members.push_back(topo.ranks_on_host(h)[static_cast<size_t>(local_rank)]);
    parts->cross_ranks = absl::StrCat("ranks ", absl::StrJoin(members, ", "));
  }
  return std::unique_ptr<ProcessGroup>(new HierGroup(rank, size, std::move(parts)));
}

HierGroup::HierGroup(int rank, int size, std::shared_ptr<hier::HierParts> parts)
    : rank_(rank), size_(size), parts_(std::move(parts)) {
  std::weak_ptr<hier::HierParts> weak = parts_;
  queue_ = internal::SerialQueue::Start([weak](const absl::Status& reason) {
    // Why all three: the running stage may be waiting on a local peer or
    // inside a cross-host collective.
    if (auto p = weak.lock()) {
      p->local->Abort(reason);
      if (p->cross) p->cross->Abort(reason);
      if (p->leaders && p->leaders != p->cross) p->leaders->Abort(reason);
    }
  });
}

HierGroup::~HierGroup() { queue_->Stop(kStopBound); }

std::string HierGroup::Describe(const char* what, const std::string& name, const Tensor& t) const {
  return absl::StrCat(what, " '", name, "' (", internal::FormatBytes(t.defined() ? t.nbytes() : 0), ") on rank ",
                      rank_, " of ", size_, " (hier)");
}

std::shared_ptr<Work> HierGroup::AllreduceSum(Tensor tensor, const std::string& name) {
  const std::string desc = Describe("allreduce", name, tensor);
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous() ||
      !(tensor.dtype() == kFloat32 || tensor.dtype() == kBFloat16 || tensor.dtype() == kFloat16)) {
    return internal::SerialQueue::Failed(
        desc, absl::InvalidArgumentError(absl::StrCat(
                  desc, ": hier sums a contiguous float32/bfloat16/float16 CPU tensor (use nccl for CUDA), got ",
                  tensor.defined() ? tensor.DebugString() : std::string("an undefined tensor"))));
  }
  std::shared_ptr<hier::HierParts> p = parts_;
  return queue_->Enqueue(desc, [p, tensor, desc, name](internal::SerialQueue::Clock::time_point) {
    return p->sharded ? hier::AllreduceSharded(*p, desc, name, tensor) : hier::AllreduceLeader(*p, desc, name, tensor);
  });
}

std::shared_ptr<Work> HierGroup::ReduceScatterSum(Tensor tensor, const std::string& name) {
  return Flat(std::move(tensor), name, /*sum=*/true);
}

std::shared_ptr<Work> HierGroup::Allgather(Tensor tensor, const std::string& name) {
  return Flat(std::move(tensor), name, /*sum=*/false);
}

std::shared_ptr<Work> HierGroup::Flat(Tensor tensor, const std::string& name, bool sum) {
  const std::string desc = Describe(sum ? "reduce-scatter" : "all-gather", name, tensor);
  const bool summable =
      tensor.defined() && (tensor.dtype() == kFloat32 || tensor.dtype() == kBFloat16 || tensor.dtype() == kFloat16);
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous() || (sum && !summable)) {
    return internal::SerialQueue::Failed(
        desc, absl::InvalidArgumentError(absl::StrCat(
                  desc, sum ? ": hier reduce-scatters a contiguous float32/bfloat16/float16 CPU tensor, got "
                            : ": hier all-gathers a contiguous CPU tensor, got ",
                  tensor.defined() ? tensor.DebugString() : std::string("an undefined tensor"))));
  }
  std::shared_ptr<hier::HierParts> p = parts_;
  return queue_->Enqueue(desc, [p, tensor, desc, name, sum](internal::SerialQueue::Clock::time_point) {
    return sum ? hier::ReduceScatter(*p, desc, name, tensor) : hier::Allgather(*p, desc, name, tensor);
  });
}

std::shared_ptr<Work> HierGroup::Broadcast(Tensor tensor, int root, const std::string& name) {
  const std::string desc = absl::StrCat(Describe("broadcast", name, tensor), " from root ", root);
  if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous()) {
    return internal::SerialQueue::Failed(
        desc, absl::InvalidArgumentError(absl::StrCat(desc, ": hier needs a defined, contiguous CPU tensor")));
  }
  if (root < 0 || root >= size_) {
    return internal::SerialQueue::Failed(desc, absl::InvalidArgumentError(absl::StrCat(desc, ": root out of range")));
  }
  std::shared_ptr<hier::HierParts> p = parts_;
  return queue_->Enqueue(desc, [p, tensor, desc, name, root](internal::SerialQueue::Clock::time_point) { return hier::Broadcast(*p, desc, name, tensor, root); });
}

absl::StatusOr<std::vector<std::string>> HierGroup::AllgatherBytes(const std::string& bytes,
                                                                   std::chrono::milliseconds timeout) {
  const std::string desc =
      absl::StrCat("allgather (", internal::FormatBytes(bytes.size()), ") on rank ", rank_, " of ", size_, " (hier)");
  auto result = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<hier::HierParts> p = parts_;
  auto work = queue_->Enqueue(desc, [p, desc, bytes, result](internal::SerialQueue::Clock::time_point) -> absl::Status {
    absl::StatusOr<std::vector<std::string>> all = hier::AllgatherBytes(*p, desc, bytes);
    if (!all.ok()) return all.status();
    *result = std::move(*all);
    return absl::OkStatus();
  });
  absl::Status st = work->Wait(timeout);
  if (!st.ok()) return st;
  return *result;
}

absl::Status HierGroup::Barrier(std::chrono::milliseconds timeout) {
  const std::string desc = absl::StrCat("barrier on rank ", rank_, " of ", size_, " (hier)");
  std::shared_ptr<hier::HierParts> p = parts_;
  return queue_->Enqueue(desc, [p, desc](internal::SerialQueue::Clock::time_point) { return hier::Barrier(*p, desc); })->Wait(timeout);
}

void HierGroup::Abort(const absl::Status& reason) {
  queue_->Poison(reason.ok() ? absl::AbortedError(absl::StrCat("process group aborted on rank ", rank_)) : reason);
}

}  // namespace psync::comm
