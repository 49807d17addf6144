// PeerWatch: wakes a ring collective's waits (ring.h) when the connection to
// one of the peers it exchanges with is lost, instead of leaving them asleep
// until the Gloo timeout.
//
// Why: Gloo's TCP pair (Debian's 2022 snapshot, and upstream since) tells a
// lost connection to the unbound buffers with receives and sends posted on
// it, but not to the one a message is being read into: a peer that dies in
// the middle of sending a shard leaves that receive's waitRecv asleep until
// its timeout (30 s by default) although the pair already knows.
//
// The same holds for a send being written when its peer dies: Gloo fails
// the sends still waiting for the peer's receive, not the one on the wire.
//
// How: a probe buffer has a receive posted from every peer on a slot nobody
// sends to. Those receives stay posted, so a pair that loses its connection
// tells the probe; a thread waits on it. On that error it finds which pairs
// are lost (posting a receive on a lost pair throws its error), arms a new
// probe on the others, and aborts the waits of the ring op being watched
// that depend on a lost peer: its receives from it (abortWaitRecv), its
// sends to it (abortWaitSend), or, for the next op that does, at once. The
// ring then waits once more without blocking: a message read or written
// whole before the loss was seen (a pair handles its stream in order)
// completes the wait; otherwise the op fails naming the lost rank.
//
// Only those waits are ours. A rank that finished its part of a collective
// and then died is no reason to fail another rank's op that is fed by a
// healthy neighbour or whose data already moved. When the loss does starve
// an op further along the ring, the neighbour that saw it fails its op and
// closes its connections (GlooGroup), and that reaches us.
//
// Threads: the watch thread waits on the probe, arms new ones and aborts;
// the communication thread opens and closes Scopes. One mutex guards the
// watched buffers, the lost peers and the probes, so a buffer is never
// aborted after its Scope closed.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace psync::comm::gloo_ring {

class PeerWatch {
 public:
  // Posts the probe's receives (the context is connected). Throws what
  // Gloo throws (a pair already lost).
  explicit PeerWatch(std::shared_ptr<gloo::Context> ctx);
  ~PeerWatch();  // aborts the probe's wait and joins the watch thread
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // The peers found lost so far, in rank order (diagnostics, tests).
  std::vector<int> lost_peers() const;

  // One ring op's watch: while alive, the waits for receives into
  // `receivers` from rank `from` are aborted once that rank is found lost,
  // and those for sends of `senders` to rank `to` once that one is. `watch`
  // may be null (nothing watched).
  class Scope {
   public:
    Scope(PeerWatch* watch, int from, std::vector<gloo::transport::UnboundBuffer*> receivers, int to,
          std::vector<gloo::transport::UnboundBuffer*> senders);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

    // Wait for `buffer`'s receive from `from` / send to `to`. Throw
    // gloo::IoException naming `what` and the lost rank when it never
    // completes, or what Gloo throws (a timeout, a pair's error).
    void WaitRecv(gloo::transport::UnboundBuffer* buffer, std::chrono::milliseconds timeout, const char* what) const;
    void WaitSend(gloo::transport::UnboundBuffer* buffer, std::chrono::milliseconds timeout, const char* what) const;

   private:
    void Wait(gloo::transport::UnboundBuffer* buffer, bool recv, std::chrono::milliseconds timeout,
              const char* what) const;

    PeerWatch* const watch_;
    const int from_, to_;
  };

 private:
  // The watch thread: waits on the newest probe until a pair is lost (then
  // Rearm) or the destructor aborts the wait.
  void Loop();
  // Posts a new probe's receives from every peer not yet known lost; those
  // whose post throws are lost (with that error, else `error`). False once
  // no peer is left to watch or the destructor began.
  bool Rearm(const std::string& error);
  // "rank R was lost: <its pair's error>", or "" while `rank` is healthy (mu_ held).
  std::string LostText(int rank) const;
  // Aborts the watched waits whose peer is lost (mu_ held).
  void AbortWatchedIfLost();

  const std::shared_ptr<gloo::Context> ctx_;
  char probe_byte_ = 0;  // never written: nothing is sent on the probe slot
  mutable std::mutex mu_;
  // Guarded by mu_.
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> probes_;  // the last is waited on; older ones
                                                                         // keep their receives on healthy pairs
  std::vector<std::string> lost_;                                        // by rank: the pair's error, "" healthy
  // The open Scope's (one op at a time; -1: none).
  int watched_from_ = -1, watched_to_ = -1;
  std::vector<gloo::transport::UnboundBuffer*> watched_receivers_, watched_senders_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace psync::comm::gloo_ring
