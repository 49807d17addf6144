// ProcessEvent: a one-shot event that crosses fork(): create it before
// RunRanks, Notify() in one child, Wait() in another. Tests use it to order
// steps across ranks ("rank 1 dies once rank 0 is inside the collective")
// instead of sleeping and hoping.
#pragma once

#include <chrono>

namespace psync::test_support {

class ProcessEvent {
 public:
  // Throws std::runtime_error when the pipe cannot be created.
  ProcessEvent();
  ~ProcessEvent();
  ProcessEvent(const ProcessEvent&) = delete;
  ProcessEvent& operator=(const ProcessEvent&) = delete;

  // Sets the event (any number of times; waiters see it once set).
  void Notify();
  // True once the event is set; false when `timeout` passed first.
  bool Wait(std::chrono::milliseconds timeout);

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
};

}  // namespace psync::test_support
