#include "worker/comm/topology.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "worker/comm/store.h"

namespace psync::comm {

absl::StatusOr<Topology> Topology::FromHostIds(std::vector<std::string> host_ids) {
  Topology t;
  std::map<std::string, int> index;
  for (size_t r = 0; r < host_ids.size(); ++r) {
    if (host_ids[r].empty()) return absl::InvalidArgumentError(absl::StrCat("rank ", r, " has an empty host id"));
    auto [it, inserted] = index.emplace(host_ids[r], static_cast<int>(t.hosts_.size()));
    if (inserted) t.hosts_.push_back(Host{host_ids[r], {}});
    Host& h = t.hosts_[static_cast<size_t>(it->second)];
    t.host_of_rank_.push_back(it->second);
    t.local_rank_.push_back(static_cast<int>(h.ranks.size()));
    h.ranks.push_back(static_cast<int>(r));
  }
  return t;
}

Topology Topology::SingleHost(int world_size) { return Blocks(world_size, std::max(1, world_size)); }

Topology Topology::Blocks(int world_size, int ranks_per_host) {
  std::vector<std::string> ids;
  const int per = std::max(1, ranks_per_host);
  for (int r = 0; r < world_size; ++r) ids.push_back(absl::StrCat("block:", (r / per) * per));
  return *FromHostIds(std::move(ids));
}

bool Topology::uniform() const {
  for (const Host& h : hosts_) {
    if (h.ranks.size() != hosts_.front().ranks.size()) return false;
  }
  return true;
}

int Topology::max_local_size() const {
  size_t m = 0;
  for (const Host& h : hosts_) m = std::max(m, h.ranks.size());
  return static_cast<int>(m);
}

std::string Topology::Describe() const {
  if (!known()) return "unknown";
  if (num_hosts() == 1) return absl::StrCat("1 host, ", world_size(), world_size() == 1 ? " rank" : " ranks");
  if (uniform()) return absl::StrCat(num_hosts(), " hosts x ", hosts_.front().ranks.size(), " ranks");
  std::vector<size_t> sizes;
  for (const Host& h : hosts_) sizes.push_back(h.ranks.size());
  return absl::StrCat(num_hosts(), " hosts (", absl::StrJoin(sizes, ","), " ranks)");
}

namespace {

// Wire form of a hint: "id:<host id>" | "block:<first>:<size>" | "none".
std::string Encode(int rank, const LocalHostHint& h) {
  if (!h.host_id.empty()) return absl::StrCat("id:", h.host_id);
  if (h.local_rank >= 0 && h.local_world_size > 0) {
    return absl::StrCat("block:", rank - h.local_rank, ":", h.local_world_size);
  }
  return "none";
}

}  // namespace

absl::StatusOr<Topology> ExchangeTopology(Store& store, int rank, int world_size, const LocalHostHint& hint,
                                          std::chrono::milliseconds timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("ExchangeTopology: bad rank ", rank, " of ", world_size));
  }
  if (hint.host_id.empty() && hint.local_world_size > 0) {
    // Why check here: a bad LOCAL_* pair would otherwise surface as another
    // rank's "overlapping blocks" error, far from its cause.
    if (hint.local_rank < 0 || hint.local_rank >= hint.local_world_size || hint.local_rank > rank ||
        rank - hint.local_rank + hint.local_world_size > world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " of ", world_size, ": LOCAL_RANK=", hint.local_rank, " LOCAL_WORLD_SIZE=",
          hint.local_world_size, " do not describe a block of consecutive ranks inside the job"));
    }
  }
  const std::string mine = Encode(rank, hint);
  if (absl::Status st = store.Set(absl::StrCat("topology/", rank), mine); !st.ok()) return st;
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(absl::StrCat("topology/", r));
  if (absl::Status st = store.Wait(keys, timeout); !st.ok()) return st;
  std::vector<std::string> hints;
  for (int r = 0; r < world_size; ++r) {
    absl::StatusOr<std::string> v = store.Get(keys[static_cast<size_t>(r)], timeout);
    if (!v.ok()) return v.status();
    hints.push_back(*v);
  }
  std::vector<std::string> ids(static_cast<size_t>(world_size));
  std::vector<int> claimed_by(static_cast<size_t>(world_size), -1);  // rank -> the rank whose block covers it
  for (int r = 0; r < world_size; ++r) {
    const std::string& h = hints[static_cast<size_t>(r)];
    if (h == "none") return Topology();
    if (h.rfind("id:", 0) == 0) {
      ids[static_cast<size_t>(r)] = h;
      continue;
    }
    std::vector<std::string> parts = absl::StrSplit(h, ':');
    int first = 0, size = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &first) || !absl::SimpleAtoi(parts[2], &size)) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " published a malformed host hint '", h, "'"));
    }
    ids[static_cast<size_t>(r)] = absl::StrCat("block:", first, ":", size);
    for (int q = first; q < first + size && q < world_size; ++q) {
      const int other = claimed_by[static_cast<size_t>(q)];
      if (other >= 0 && hints[static_cast<size_t>(other)] != h) {
        return absl::InvalidArgumentError(absl::StrCat(
            "LOCAL_RANK/LOCAL_WORLD_SIZE disagree: rank ", other, " says its host holds ranks from ",
            hints[static_cast<size_t>(other)], ", rank ", r, " says ", h, " (both cover rank ", q, ")"));
      }
      claimed_by[static_cast<size_t>(q)] = r;
    }
  }
  return Topology::FromHostIds(std::move(ids));
}

int CrossHostDistance(const Topology& topology) {
  if (!topology.known() || topology.num_hosts() < 2) return 1;
  const int world = topology.world_size();
  for (int d = 1; d < world; ++d) {
    bool apart = true;
    for (int r = 0; r < world && apart; ++r) apart = topology.host_index(r) != topology.host_index((r + d) % world);
    if (apart) return d;
  }
  return 1;
}

}  // namespace psync::comm
