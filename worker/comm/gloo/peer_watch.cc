#include "worker/comm/gloo/peer_watch.h"

#include <exception>
#include <utility>

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

uint64_t ProbeSlot() { return gloo::Slot::build(kProbeSlotPrefix, 0); }

}  // namespace

PeerWatch::PeerWatch(std::shared_ptr<gloo::Context> ctx)
    : ctx_(std::move(ctx)), lost_(static_cast<size_t>(ctx_->size)) {
  auto probe = ctx_->createUnboundBuffer(&probe_byte_, 1);
  for (int r = 0; r < ctx_->size; ++r) {
    if (r != ctx_->rank) probe->recv(r, ProbeSlot(), 0, 1);
  }
  probes_.push_back(std::move(probe));
  thread_ = std::thread([this] { Loop(); });
}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    // Under the lock: Rearm adds a probe only under it, and only before
    // stopping_; a wait not yet begun returns at once too.
    probes_.back()->abortWaitRecv();
  }
  thread_.join();
}

PeerWatch::Scope::Scope(PeerWatch* watch, int from, std::vector<gloo::transport::UnboundBuffer*> receivers, int to,
                        std::vector<gloo::transport::UnboundBuffer*> senders)
    : watch_(watch), from_(from), to_(to) {
  if (!watch_) return;
  std::lock_guard<std::mutex> l(watch_->mu_);
  watch_->watched_from_ = from_;
  watch_->watched_to_ = to_;
  watch_->watched_receivers_ = std::move(receivers);
  watch_->watched_senders_ = std::move(senders);
  // A peer already lost: this op's waits on it end at once, not at the timeout.
  watch_->AbortWatchedIfLost();
}

PeerWatch::Scope::~Scope() {
  if (!watch_) return;
  std::lock_guard<std::mutex> l(watch_->mu_);
  // Why under the lock: the watch thread aborts buffers only under it, so
  // none is touched once the op that owns them returns.
  watch_->watched_from_ = watch_->watched_to_ = -1;
  watch_->watched_receivers_.clear();
  watch_->watched_senders_.clear();
}

void PeerWatch::Scope::WaitRecv(gloo::transport::UnboundBuffer* buffer, std::chrono::milliseconds timeout,
                                const char* what) const {
  Wait(buffer, true, timeout, what);
}

void PeerWatch::Scope::WaitSend(gloo::transport::UnboundBuffer* buffer, std::chrono::milliseconds timeout,
                                const char* what) const {
  Wait(buffer, false, timeout, what);
}

void PeerWatch::Scope::Wait(gloo::transport::UnboundBuffer* buffer, bool recv, std::chrono::milliseconds timeout,
                            const char* what) const {
  auto wait = [&](std::chrono::milliseconds t) {
    return recv ? buffer->waitRecv(nullptr, t) : buffer->waitSend(nullptr, t);
  };
  if (wait(timeout)) return;
  // Aborted: the peer was found lost. Its message may have moved whole
  // before the end of its stream was seen (Gloo aborts a wait even then),
  // so look again without blocking; twice, as a second loss may have
  // aborted the first look. A zero wait that finds nothing counts as
  // Gloo's timeout and closes the context's pairs: the failing group does
  // that next anyway.
  std::string gloo_says;
  try {
    for (int i = 0; i < 2; ++i) {
      if (wait(std::chrono::milliseconds(0))) return;
    }
  } catch (const std::exception& e) {
    gloo_says = e.what();
  }
  std::string why;
  if (watch_) {
    std::lock_guard<std::mutex> l(watch_->mu_);
    why = watch_->LostText(recv ? from_ : to_);
  }
  if (why.empty()) why = gloo_says;
  throw gloo::IoException(std::string(what) + " aborted" + (why.empty() ? "" : ": the connection to " + why));
}

std::vector<int> PeerWatch::lost_peers() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<int> out;
  for (size_t r = 0; r < lost_.size(); ++r) {
    if (!lost_[r].empty()) out.push_back(static_cast<int>(r));
  }
  return out;
}

std::string PeerWatch::LostText(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(lost_.size()) || lost_[static_cast<size_t>(rank)].empty()) return "";
  return "rank " + std::to_string(rank) + " was lost: " + lost_[static_cast<size_t>(rank)];
}

void PeerWatch::AbortWatchedIfLost() {
  if (!LostText(watched_from_).empty()) {
    for (gloo::transport::UnboundBuffer* b : watched_receivers_) b->abortWaitRecv();
  }
  if (!LostText(watched_to_).empty()) {
    for (gloo::transport::UnboundBuffer* b : watched_senders_) b->abortWaitSend();
  }
}

void PeerWatch::Loop() {
  for (;;) {
    gloo::transport::UnboundBuffer* probe = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      probe = probes_.back().get();  // stays alive until the destructor
    }
    std::string error;
    try {
      // Returns false when the destructor aborts it; nothing is ever received.
      if (!probe->waitRecv(nullptr, kForever)) return;
      error = "the probe received a message";
    } catch (const std::exception& e) {
      error = e.what();  // a lost pair's error, e.g. "Connection closed by peer [127.0.0.1]:40123"
    } catch (...) {
      error = "a connection was lost";
    }
    if (!Rearm(error)) return;
  }
}

bool PeerWatch::Rearm(const std::string& error) {
  std::vector<int> healthy;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return false;
    for (int r = 0; r < ctx_->size; ++r) {
      if (r != ctx_->rank && lost_[static_cast<size_t>(r)].empty()) healthy.push_back(r);
    }
  }
  // Posting a receive on a lost pair throws that pair's error (it is set
  // before the pair wakes its buffers, under the pair's lock); on the
  // others it stays posted and tells the new probe of the next loss.
  auto probe = ctx_->createUnboundBuffer(&probe_byte_, 1);
  std::vector<std::pair<int, std::string>> found;
  for (int r : healthy) {
    try {
      probe->recv(r, ProbeSlot(), 0, 1);
    } catch (const std::exception& e) {
      found.emplace_back(r, e.what());
    } catch (...) {
      found.emplace_back(r, error);
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  if (found.empty()) {
    // The probe woke but every pair still takes receives (it received a
    // message, which nobody sends): count every peer lost rather than
    // leave a cut-off receive to the timeout.
    for (int r : healthy) found.emplace_back(r, error);
  }
  // Every peer found lost: the new probe has no receive left to tell of a loss.
  const bool none_left = found.size() == healthy.size();
  for (auto& [r, e] : found) lost_[static_cast<size_t>(r)] = std::move(e);
  AbortWatchedIfLost();
  if (stopping_ || none_left) return false;
  probes_.push_back(std::move(probe));
  return true;
}

}  // namespace psync::comm::gloo_ring
