// GlooGroup: the CPU ProcessGroup, over Gloo's TCP transport.
//
// Threads and ownership:
//  * The caller's threads issue collectives (AllreduceSum, ReduceScatterSum,
//    Allgather, Broadcast, AllgatherBytes, Barrier) and Wait on Work
//    handles; Abort may come from any thread. Issuing only enqueues.
//  * One communication thread per group (the shared internal::SerialQueue,
//    as shm and hier) runs the queued collectives strictly in issue order,
//    each with its own Gloo tag. It is the only thread that touches the Gloo
//    context's collectives (Abort may close its pairs).
//  * The queue holds the queue state and the poison reason under its mutex;
//    each Work has its own.
//
// Failure model (the queue's): the first failure (a Gloo exception such as
// a peer that died, a Work::Wait timeout, or Abort) poisons the group, which
// closes its connections. Every pending and later collective then fails
// fast with that original reason. A Wait that times out poisons the group
// too: the collective is still in flight on the peers and the group cannot
// be used safely afterwards (like NCCL's watchdog).
//
// Reduce-scatter and all-gather are ring algorithms over Gloo's transport
// (gloo/ring.h), for flat buffers with the shards of comm/flat_shard.h; a
// PeerWatch (gloo/peer_watch.h) ends their waits within a fraction of a
// second when a peer's connection is lost mid-message, which Gloo would
// leave to the timeout. Gloo's own allreduce still can.
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
#include <functional>

#include "psync/comm/process_group.h"
#include "worker/comm/serial_queue.h"
#include "worker/comm/store.h"

namespace gloo {
class Context;
}  // namespace gloo

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
  std::shared_ptr<Work> ReduceScatterSum(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> Allgather(Tensor tensor, const std::string& name) override;
  std::shared_ptr<Work> Shift(Tensor send, Tensor recv, int distance, const std::string& name) override;
  std::shared_ptr<Work> Broadcast(Tensor tensor, int root, const std::string& name) override;
  absl::StatusOr<std::vector<std::string>> AllgatherBytes(const std::string& bytes,
                                                          std::chrono::milliseconds timeout) override;
  absl::Status Barrier(std::chrono::milliseconds timeout) override;
  void Abort(const absl::Status& reason) override;

  // Added: OK while healthy, else the reason the group was poisoned.
  absl::Status health() const;

  struct State;  // implementation detail (gloo_group.cc)

 private:
  using GlooFn = std::function<void(const std::shared_ptr<gloo::Context>&, uint32_t tag)>;
  GlooGroup(int rank, int size, GlooOptions options, std::shared_ptr<State> state);
  // Queues `fn` (run with the Gloo context and the op's tag), its Gloo
  // exceptions turned into a Status naming `desc`.
  std::shared_ptr<Work> Enqueue(std::string desc, GlooFn fn);
  std::string Describe(const char* what, const std::string& name, const Tensor& t) const;
  absl::Status CheckFlat(const std::string& desc, const Tensor& tensor, bool sum) const;

  const int rank_;
  const int size_;
  const GlooOptions options_;
  std::shared_ptr<State> state_;                   // shared with the queued ops
  std::shared_ptr<internal::SerialQueue> queue_;   // the communication thread; stopped (bounded) by the destructor
};

}  // namespace psync::comm
