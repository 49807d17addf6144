// Work: the handle of an asynchronous collective.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"

namespace psync::comm {

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished, failed, or `timeout` passed.
  // Never hangs: a timeout returns DeadlineExceeded naming the operation
  // (e.g. "allreduce 'bucket 3' (4.0 MiB) on rank 1 of 2 timed out after 30s").
  virtual absl::Status Wait(std::chrono::milliseconds timeout) = 0;
  // Non-blocking: true once finished (successfully or not).
  virtual bool IsCompleted() = 0;
  // The operation's description, as used in error messages.
  virtual std::string Describe() const = 0;
};

}  // namespace psync::comm
