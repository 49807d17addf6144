#include "worker/runtime/sharding.h"

namespace psync::runtime {

std::vector<int64_t> MicroBatchRows(const BatchGeometry& g, int64_t step, int rank, int64_t micro) {
  const int64_t n = g.micro_rows();
  const int64_t first = static_cast<int64_t>(rank) * g.shard_rows() + micro * n;  // k of the first row
  std::vector<int64_t> rows(static_cast<size_t>(n));
  // (s*B + k) mod N without overflow for large s: reduce each factor first.
  const int64_t base = ((step % g.dataset_rows) * (g.global_batch % g.dataset_rows)) % g.dataset_rows;
  for (int64_t i = 0; i < n; ++i) rows[i] = (base + (first + i) % g.dataset_rows) % g.dataset_rows;
  return rows;
}

}  // namespace psync::runtime
