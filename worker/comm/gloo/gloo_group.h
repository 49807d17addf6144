// GlooGroup: the CPU ProcessGroup, over Gloo's TCP transport.
//
// Threads and ownership:
//  * The caller's threads issue collectives (AllreduceSum, Broadcast,
//    Allgather, Barrier) and Wait on Work handles; Abort may come from any
//    thread. Issuing only enqueues.
//  * One communication thread per group runs the queued collectives strictly
//    in issue order, each with its own Gloo tag. It is the only thread that
//    touches the Gloo context's collectives (Abort may close its pairs).
//  * All mutable group state (queue, running op, poison reason) lives in one
//    shared State object under one mutex; each Work has its own mutex.
//
// Failure model: the first failure (a Gloo exception such as a peer that
// died, a Work::Wait timeout, or Abort) poisons the group. Every pending and
// later collective then fails fast with that original reason. A Wait that
// times out poisons the group too: the collective is still in flight on the
// peers and the group cannot be used safely afterwards (like NCCL's watchdog).
//
// Collectives use the Gloo context timeout (= GlooOptions::timeout), so a
// dead or absent peer unblocks the communication thread within it.
//
// Create() sets SIGPIPE to SIG_IGN if it is still SIG_DFL: Gloo writes to
// sockets with writev, and a peer that died would otherwise kill this
// process with SIGPIPE instead of producing an error.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "worker/comm/process_group.h"
#include "worker/comm/store.h"

namespace psync::comm {

struct GlooOptions {
  std::string hostname = "127.0.0.1";  // address to bind and advertise (used when iface is empty)
  std::string iface;                   // network interface (e.g. "eth0"); wins over hostname
  std::chrono::milliseconds timeout{30000};  // rendezvous and per-collective timeout
  // Namespace for this group's keys in `store` (e.g. "run42/gloo/0"). Every
  // group instance needs fresh keys: a reused prefix reads stale addresses.
  std::string prefix;
};

class GlooGroup : public ProcessGroup {
 public:
  // Blocks until all `size` ranks have joined (rendezvous through `store`),
  // or options.timeout; the error then names the missing store keys.
  static absl::StatusOr<std::unique_ptr<ProcessGroup>> Create(std::shared_ptr<Store> store, int rank, int size,
                                                             GlooOptions options = {});
  ~GlooGroup() override;
  GlooGroup(const GlooGroup&) = delete;
  GlooGroup& operator=(const GlooGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }

  // `tensor` must be a CPU tensor; the Work keeps a handle to it.
  std::shared_ptr<Work> AllreduceSum(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> Broadcast(Tensor tensor, int root, const std::string& name) override;
  absl::StatusOr<std::vector<std::string>> Allgather(const std::string& bytes,
                                                     std::chrono::milliseconds timeout) override;
  absl::Status Barrier(std::chrono::milliseconds timeout) override;
  void Abort(const absl::Status& reason) override;

  // Added: OK while healthy, else the reason the group was poisoned.
  absl::Status health() const;

  struct State;  // implementation detail (gloo_group.cc)

 private:
  GlooGroup(int rank, int size, GlooOptions options, std::shared_ptr<State> state);

  const int rank_;
  const int size_;
  const GlooOptions options_;
  std::shared_ptr<State> state_;  // shared with the communication thread
  std::thread thread_;            // the communication thread; joined (bounded) by the destructor
};

}  // namespace psync::comm
