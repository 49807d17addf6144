#include "worker/comm/gloo/peer_watch.h"

#include <exception>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "worker/comm/gloo/ring.h"

namespace psync::comm::gloo_ring {
namespace {

// The probe's wait must never time out: a Gloo wait that does closes every
// pair of the context ("Application timeout caused pair closure").
constexpr std::chrono::hours kForever{24 * 365 * 10};

}  // namespace

PeerWatch::PeerWatch(std::shared_ptr<gloo::Context> ctx) : ctx_(std::move(ctx)) {
  probe_ = ctx_->createUnboundBuffer(&probe_byte_, 1);
  const uint64_t slot = gloo::Slot::build(kProbeSlotPrefix, 0);
  for (int r = 0; r < ctx_->size; ++r) {
    if (r != ctx_->rank) probe_->recv(r, slot, 0, 1);
  }
  thread_ = std::thread([this] { Loop(); });
}

PeerWatch::~PeerWatch() {
  probe_->abortWaitRecv();  // a wait not yet begun returns at once too
  thread_.join();
}

PeerWatch::Scope::Scope(PeerWatch* watch, std::vector<gloo::transport::UnboundBuffer*> buffers) : watch_(watch) {
  if (!watch_) return;
  std::lock_guard<std::mutex> l(watch_->mu_);
  watch_->watched_ = std::move(buffers);
  // A connection already lost: this op's waits end at once, not at the timeout.
  if (!watch_->lost_.empty()) watch_->AbortWatched();
}

PeerWatch::Scope::~Scope() {
  if (!watch_) return;
  std::lock_guard<std::mutex> l(watch_->mu_);
  // Why under the lock: the watch thread aborts buffers only under it, so
  // none is touched once the op that owns them returns.
  watch_->watched_.clear();
}

std::string PeerWatch::lost() const {
  std::lock_guard<std::mutex> l(mu_);
  return lost_;
}

void PeerWatch::CheckWait(bool done, const PeerWatch* watch, const char* what) {
  if (done) return;
  const std::string why = watch ? watch->lost() : std::string();
  throw gloo::IoException(std::string(what) + " aborted" + (why.empty() ? "" : ": " + why));
}

void PeerWatch::AbortWatched() {
  for (gloo::transport::UnboundBuffer* b : watched_) {
    b->abortWaitRecv();
    b->abortWaitSend();
  }
}

void PeerWatch::Loop() {
  std::string error;
  try {
    // Returns false when the destructor aborts it; nothing is ever received.
    if (!probe_->waitRecv(nullptr, kForever)) return;
    error = "the probe received a message";
  } catch (const std::exception& e) {
    error = e.what();  // the lost pair's error, e.g. "Connection closed by peer [127.0.0.1]:40123"
  } catch (...) {
    error = "a connection was lost";
  }
  std::lock_guard<std::mutex> l(mu_);
  lost_ = error;
  AbortWatched();
}

}  // namespace psync::comm::gloo_ring
