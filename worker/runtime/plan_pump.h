// PlanPump: the thread that reads the coordinator's plans off the Train
// stream, in iteration order, into the PlanMailbox the trainer and the
// reducer wait on.
//
// On ABORT or a lost coordinator it aborts the process group (so a blocked
// collective returns) and, if the training thread still has not finished
// after a grace period, ends the process itself: the exit bound holds even
// when a backend cannot be unblocked.
//
// Threads: the pump's own thread reads the client and delivers into the
// mailbox; Stop() and fatal_code() are for the training thread. mu_ guards
// stop_; fatal_ is atomic.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "worker/comm/process_group.h"
#include "worker/ddp/bucket_assignment.h"
#include "worker/runtime/coordinator/coordinator_client.h"
#include "worker/runtime/plan_source.h"

namespace psync::runtime {

// The coordinator's messages as the trainer and reducer consume them.
ddp::BucketPlan ToDdpPlan(const coordinator::BucketPlan& p);
IterationPlan ToIterationPlan(const coordinator::Plan& p, size_t num_params);

class PlanPump {
 public:
  PlanPump(coordinator::CoordinatorClient* client, std::shared_ptr<PlanMailbox> mailbox,
           std::shared_ptr<comm::ProcessGroup> group, size_t num_params);
  ~PlanPump() { Stop(); }
  PlanPump(const PlanPump&) = delete;
  PlanPump& operator=(const PlanPump&) = delete;

  // Stops and joins the thread; idempotent.
  void Stop();
  // 0 while all is well; kExitPeerLost after an ABORT plan; kExitCoordinatorLost
  // once the stream failed. Set from the pump's thread.
  const std::atomic<int>* fatal_code() const { return &fatal_; }

 private:
  void Run();
  bool stopping();
  void Fatal(int code, const std::string& reason);

  coordinator::CoordinatorClient* client_;
  std::shared_ptr<PlanMailbox> mailbox_;
  std::shared_ptr<comm::ProcessGroup> group_;
  size_t num_params_;
  std::atomic<int> fatal_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the state above exists
};

}  // namespace psync::runtime
