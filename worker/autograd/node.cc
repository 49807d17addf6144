#include "psync/autograd/node.h"

#include <algorithm>

namespace psync::autograd {

uint64_t NextSequenceNr() {
  // Thread-local: each training thread (one per rank in the threaded tests)
  // numbers its own nodes, so the order of one thread's graph never depends
  // on what other threads build concurrently.
  thread_local uint64_t next = 0;
  return next++;
}

Node::Node(int priority) : sequence_nr_(NextSequenceNr()), priority_(priority) {}

int Node::AddPreHook(PreHook hook) {
  const int id = next_hook_id_++;
  pre_hooks_.emplace_back(id, std::move(hook));
  return id;
}

int Node::AddPostHook(PostHook hook) {
  const int id = next_hook_id_++;
  post_hooks_.emplace_back(id, std::move(hook));
  return id;
}

void Node::RemovePostHook(int id) {
  post_hooks_.erase(std::remove_if(post_hooks_.begin(), post_hooks_.end(),
                                   [id](const auto& entry) { return entry.first == id; }),
                    post_hooks_.end());
}

void Node::RemovePreHook(int id) {
  pre_hooks_.erase(std::remove_if(pre_hooks_.begin(), pre_hooks_.end(),
                                  [id](const auto& entry) { return entry.first == id; }),
                   pre_hooks_.end());
}

}  // namespace psync::autograd
