// How a tensor of `count` elements is cut for the sharded collectives of a
// local group of `parts` ranks: shard j (owned by local rank j) is one
// contiguous range, the rule of comm/flat_shard.h (a multiple of 64 bytes
// long, all but the tail), and each step moves one "piece" of every shard
// through the workspace slots (parts pieces per slot).
#pragma once

#include <algorithm>
#include <cstddef>

#include "worker/comm/flat_shard.h"

namespace psync::comm::shm {

using Range = ShardRange;

class ShardLayout {
 public:
  ShardLayout(size_t count, int parts, size_t elem_size, size_t slot_bytes)
      : count_(count), parts_(static_cast<size_t>(parts)), shard_(ShardSize(count, parts, elem_size)) {
    const size_t align = 64 / elem_size;  // elements per cache line
    piece_ = slot_bytes / elem_size / parts_ / align * align;
    rounds_ = shard_ == 0 ? 1 : (shard_ + piece_ - 1) / piece_;
  }
  size_t count() const { return count_; }
  // Steps needed (at least 1: the first step also checks that all ranks
  // issued the same collective).
  size_t rounds() const { return rounds_; }
  // Elements per piece slot (the offset of piece j in a slot is j * piece()).
  size_t piece() const { return piece_; }
  Range shard(int j) const {
    const size_t b = std::min(count_, static_cast<size_t>(j) * shard_);
    return Range{b, std::min(count_, b + shard_)};
  }
  // The part of shard j moved in round r (may be empty).
  Range piece(int j, size_t r) const {
    const Range s = shard(j);
    const size_t b = std::min(s.end, s.begin + r * piece_);
    return Range{b, std::min(s.end, b + piece_)};
  }

 private:
  size_t count_;
  size_t parts_;
  size_t shard_ = 0;
  size_t piece_ = 0;
  size_t rounds_ = 1;
};

}  // namespace psync::comm::shm
