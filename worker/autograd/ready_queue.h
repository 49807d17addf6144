// ReadyQueue: the nodes of one backward whose input gradients are all in,
// ordered by (priority desc, sequence_nr desc); see engine.h for why.
#pragma once

#include <cstdint>
#include <memory>
#include <queue>
#include <vector>

#include "psync/autograd/node.h"

namespace psync::autograd {

class ReadyQueue {
 public:
  // use_priority = false orders by sequence_nr alone (a plain engine).
  explicit ReadyQueue(bool use_priority) : heap_(Compare{use_priority}) {}

  void Push(std::shared_ptr<Node> node) { heap_.push(Entry{std::move(node), pushed_++}); }
  // The node to run next. Precondition: !empty().
  std::shared_ptr<Node> Pop();
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }

 private:
  struct Entry {
    std::shared_ptr<Node> node;
    uint64_t push_order;  // tie-break: sequence numbers are per thread, so
                          // nodes built on different threads may collide
  };
  struct Compare {
    bool use_priority;
    // True when `a` runs after `b` (std::priority_queue pops the max).
    bool operator()(const Entry& a, const Entry& b) const {
      if (use_priority && a.node->priority() != b.node->priority()) {
        return a.node->priority() < b.node->priority();
      }
      if (a.node->sequence_nr() != b.node->sequence_nr()) {
        return a.node->sequence_nr() < b.node->sequence_nr();
      }
      return a.push_order > b.push_order;  // first pushed, first run
    }
  };
  uint64_t pushed_ = 0;
  std::priority_queue<Entry, std::vector<Entry>, Compare> heap_;
};

inline std::shared_ptr<Node> ReadyQueue::Pop() {
  // Copy, not move: pop() still compares the top entry while sifting.
  std::shared_ptr<Node> node = heap_.top().node;
  heap_.pop();
  return node;
}

}  // namespace psync::autograd
