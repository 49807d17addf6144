// How reduce-scatter and all-gather (ProcessGroup::ReduceScatterSum,
// Allgather) cut a flat buffer of `count` elements among `parts`
// ranks: rank j owns the contiguous range [j*s, (j+1)*s) clipped to
// `count`, where s = ShardSize(count, parts, elem_size) is ceil(count/parts)
// rounded up to a whole number of 64-byte cache lines. So every shard but
// the last non-empty one is exactly s long (the uneven tail is the short
// last shard, and with few elements the last ranks may own nothing), and
// shards never share a cache line. Every backend and the shm collectives'
// own sharding use this one rule; a buffer of PaddedCount(count, ...)
// elements splits into `parts` shards of exactly s.
#pragma once

#include <algorithm>
#include <cstddef>

namespace psync::comm {

struct ShardRange {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
  bool empty() const { return end == begin; }
};

inline size_t ShardSize(size_t count, int parts, size_t elem_size) {
  const size_t p = static_cast<size_t>(parts < 1 ? 1 : parts);
  const size_t align = elem_size >= 64 ? 1 : 64 / elem_size;  // elements per cache line
  const size_t s = (count + p - 1) / p;
  return (s + align - 1) / align * align;
}

inline ShardRange ShardOf(size_t count, int parts, int index, size_t elem_size) {
  const size_t s = ShardSize(count, parts, elem_size);
  const size_t b = std::min(count, static_cast<size_t>(index) * s);
  return ShardRange{b, std::min(count, b + s)};
}

// The smallest count >= `count` whose shards are all the same length.
inline size_t PaddedCount(size_t count, int parts, size_t elem_size) {
  return ShardSize(count, parts, elem_size) * static_cast<size_t>(parts < 1 ? 1 : parts);
}

}  // namespace psync::comm
