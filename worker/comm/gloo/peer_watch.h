// PeerWatch: wakes a ring collective's waits (ring.h) when a connection to
// a peer is lost, instead of leaving them asleep until the Gloo timeout.
//
// Why: Gloo's TCP pair (Debian's 2022 snapshot, and upstream since) tells a
// lost connection to the unbound buffers with receives and sends posted on
// it, but not to the one a message is being read into: a peer that dies in
// the middle of sending a shard leaves that receive's waitRecv asleep until
// its timeout (30 s by default) although the pair already knows.
//
// How: a probe buffer has a receive posted from every peer on a slot nobody
// sends to, for the group's life. Those receives stay posted, so a pair
// that loses its connection tells the probe; a thread waits on it and, on
// that error, aborts the waits (abortWaitRecv, abortWaitSend) of the ring
// op being watched (a Scope is alive), or of the next one at once, and
// keeps the error's text, which the ring then throws.
//
// Threads: the watch thread waits on the probe and aborts; the
// communication thread opens and closes Scopes. One mutex guards the
// watched buffers and the error, so a buffer is never aborted after its
// Scope closed.
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

  // While alive, `buffers` have their waits aborted once a pair is found lost.
  class Scope {
   public:
    Scope(PeerWatch* watch, std::vector<gloo::transport::UnboundBuffer*> buffers);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PeerWatch* const watch_;
  };

  // Why a wait was aborted: the lost pair's error ("" while none was found).
  std::string lost() const;
  // A ring's check of a wait's result (`done` false: aborted): throws
  // gloo::IoException naming `what` and the lost connection.
  static void CheckWait(bool done, const PeerWatch* watch, const char* what);

 private:
  // The watch thread: waits on the probe until a pair is lost or the
  // destructor aborts the wait.
  void Loop();
  // Aborts the watched buffers' waits (mu_ held).
  void AbortWatched();

  const std::shared_ptr<gloo::Context> ctx_;
  char probe_byte_ = 0;
  std::unique_ptr<gloo::transport::UnboundBuffer> probe_;  // receives posted from every peer; never filled
  mutable std::mutex mu_;
  // Guarded by mu_.
  std::vector<gloo::transport::UnboundBuffer*> watched_;  // the open Scope's buffers (one op at a time)
  std::string lost_;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace psync::comm::gloo_ring
