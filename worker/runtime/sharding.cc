#include "worker/runtime/sharding.h"

#include "worker/data/example_order.h"

namespace psync::runtime {

std::vector<int64_t> MicroBatchRows(const BatchGeometry& g, int64_t step, int rank, int64_t micro) {
  data::BatchSpec spec;
  spec.step = step;
  spec.rank = rank;
  spec.world_size = g.world_size;
  spec.micro = micro;
  spec.accumulate = g.accumulate;
  spec.global_batch = g.global_batch;
  return data::ExampleOrder(g.dataset_rows, /*shuffle=*/false, /*seed=*/0).MicroBatch(spec);
}

}  // namespace psync::runtime
