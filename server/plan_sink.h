// PlanSink: where the Plans of one Train stream's ranks go (one rank, or
// several on a host stream; coordinator.proto "Host streams"). The Train
// stream's writer (train_reactor.cc) is the real one; PlanQueue
// (plan_queue.h) is a plain queue for tests and the fuzzer. PlanDelivery
// (plan_delivery.h) decides which sink gets which plan.
//
// Push and Close are called with JobState's lock held, so that plans reach
// every sink in iteration order; implementations only queue there (no
// blocking, no call back into JobState). When Push returns true, Flush is
// called after that lock is released, and that is where a sink starts
// sending (e.g. a gRPC write), so slow sends never hold the job's lock.
#pragma once

#include <memory>
#include <vector>

#include "psync/v1/coordinator.pb.h"

namespace psync::server {

using PlanPtr = std::shared_ptr<const v1::Plan>;  // one Plan object shared by every rank's sink

class PlanSink {
 public:
  virtual ~PlanSink() = default;
  // Queues `plan`; true = call Flush() once the job's lock is released.
  virtual bool Push(PlanPtr plan) = 0;
  // No more plans will be pushed; what is queued still goes out.
  virtual void Close() = 0;
  virtual void Flush() {}
};

// Runs the Flush() of many sinks (one plan broadcast, after JobState has
// released its lock). Without one, the sinks are flushed in order on the
// calling thread; PlanFanOut (plan_fanout.h) spreads them over a few threads.
class FlushRunner {
 public:
  virtual ~FlushRunner() = default;
  virtual void FlushAll(std::vector<std::shared_ptr<PlanSink>> sinks) = 0;
};

}  // namespace psync::server
