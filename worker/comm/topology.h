// Topology: which ranks of a job share a host (and so can reduce through
// shared memory). Groups that care (shm, hier; the backend choice) get it
// through GroupOptions::topology.
//
// A host is named by an opaque host id string; ranks with equal ids share
// /dev/shm. Where the ids come from is the caller's business: the
// coordinator's Join (every rank's host identity), or the torchrun
// environment (LOCAL_RANK / LOCAL_WORLD_SIZE: ranks on one host are a
// contiguous block), or tests filling them in directly.
//
// Local rank = position among the ranks of the same host, in global rank
// order; hosts are numbered in order of their lowest rank.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psync::comm {

class Store;

class Topology {
 public:
  Topology() = default;  // unknown: no host information
  // host_ids[r] = host of rank r. InvalidArgument when one is empty.
  static absl::StatusOr<Topology> FromHostIds(std::vector<std::string> host_ids);
  // Every rank on one host (tests, and --backend=shm without host information).
  static Topology SingleHost(int world_size);
  // Hosts of `ranks_per_host` consecutive ranks each (the last may be short).
  static Topology Blocks(int world_size, int ranks_per_host);

  bool known() const { return !host_of_rank_.empty(); }
  int world_size() const { return static_cast<int>(host_of_rank_.size()); }
  int num_hosts() const { return static_cast<int>(hosts_.size()); }
  // Host index of rank r (0 .. num_hosts-1).
  int host_index(int rank) const { return host_of_rank_[static_cast<size_t>(rank)]; }
  const std::string& host_id(int rank) const { return hosts_[static_cast<size_t>(host_index(rank))].id; }
  // Global ranks on host h, ascending.
  const std::vector<int>& ranks_on_host(int host) const { return hosts_[static_cast<size_t>(host)].ranks; }
  int local_rank(int rank) const { return local_rank_[static_cast<size_t>(rank)]; }
  int local_size(int rank) const { return static_cast<int>(ranks_on_host(host_index(rank)).size()); }
  bool single_host() const { return known() && num_hosts() == 1; }
  // Every host has the same number of ranks.
  bool uniform() const;
  int max_local_size() const;
  // "2 hosts x 2 ranks", "1 host, 3 ranks", "3 hosts (2,1,1 ranks)", "unknown".
  std::string Describe() const;

 private:
  struct Host {
    std::string id;
    std::vector<int> ranks;
  };
  std::vector<int> host_of_rank_;
  std::vector<int> local_rank_;
  std::vector<Host> hosts_;
};

// What one rank knows about its own host before talking to the others.
struct LocalHostHint {
  std::string host_id;        // e.g. $PSYNC_HOST_ID; empty = not given
  int local_rank = -1;        // $LOCAL_RANK; -1 = not given
  int local_world_size = -1;  // $LOCAL_WORLD_SIZE; -1 = not given
};

// Every rank publishes its hint through `store` (keys under "topology/") and
// builds the same Topology from all of them: explicit host ids win; else the
// LOCAL_RANK / LOCAL_WORLD_SIZE blocks (rank - local_rank is the block's
// first rank); a rank with neither makes the topology unknown. Blocks that
// disagree (two ranks claiming different blocks that overlap) are an
// InvalidArgument naming both ranks.
absl::StatusOr<Topology> ExchangeTopology(Store& store, int rank, int world_size, const LocalHostHint& hint,
                                          std::chrono::milliseconds timeout);

// The shortest ring distance d (1..world-1) at which every rank r's
// partner (r + d) mod world is on another host than r; 1 when no d does
// (one host, or an uneven layout) or the layout is unknown.
int CrossHostDistance(const Topology& topology);

}  // namespace psync::comm
