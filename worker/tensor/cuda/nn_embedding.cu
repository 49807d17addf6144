// CUDA embedding lookup and its deterministic scatter-add backward.
//
// Backward without float atomics: the positions are sorted by id with CUB's
// radix sort, which is stable, so each id's positions come out in
// increasing order; one thread per (row, column) then sums its row's run in
// that order in double. That is exactly the CPU's order (cpu/nn.cc), so the
// gradient has the same bits on every run and on both devices. Everything
// stays on the compute stream: no host synchronization, no copy of the ids
// to the host.
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cuda/launch.cuh"
#include "worker/tensor/cuda/nn_embedding.h"

namespace psync::cuda {
namespace {

// y [n, c] = weight[ids] rows; NaN rows for ids outside [0, v_rows).
__global__ void EmbeddingKernel(const int64_t* ids, const float* weight, int64_t v_rows, int64_t n, int64_t c,
                                float* y) {
  PSYNC_GRID_STRIDE(k, n * c) {
    const int64_t i = k / c, j = k % c;
    const int64_t id = ids[i];
    y[k] = (id < 0 || id >= v_rows) ? nanf("") : weight[id * c + j];
  }
}

// Sort keys (the id; v_rows for an id out of range, which sorts last and is
// skipped) and values (the position).
__global__ void EmbeddingKeysKernel(const int64_t* ids, int64_t n, int64_t v_rows, int* keys, int* positions) {
  PSYNC_GRID_STRIDE(i, n) {
    const int64_t id = ids[i];
    keys[i] = (id < 0 || id >= v_rows) ? static_cast<int>(v_rows) : static_cast<int>(id);
    positions[i] = static_cast<int>(i);
  }
}

// [start[v], end[v]): the run of key v in the sorted keys (left 0, 0 by the
// memset when v does not occur).
__global__ void EmbeddingRunsKernel(const int* keys, int64_t n, int64_t v_rows, int* start, int* end) {
  PSYNC_GRID_STRIDE(i, n) {
    const int k = keys[i];
    if (k < v_rows) {
      if (i == 0 || keys[i - 1] != k) start[k] = static_cast<int>(i);
      if (i == n - 1 || keys[i + 1] != k) end[k] = static_cast<int>(i + 1);
    }
  }
}

// dweight[v, j] = sum of grad[positions[q], j] over v's run, q increasing.
__global__ void EmbeddingAccumulateKernel(const float* grad, const int* positions, const int* start, const int* end,
                                          int64_t v_rows, int64_t c, float* dweight) {
  PSYNC_GRID_STRIDE(k, v_rows * c) {
    const int64_t v = k / c, j = k % c;
    double acc = 0.0;
    for (int q = start[v]; q < end[v]; ++q) acc += grad[static_cast<int64_t>(positions[q]) * c + j];
    dweight[k] = static_cast<float>(acc);
  }
}

size_t AlignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

void EmbeddingForward(const Tensor& ids, const Tensor& weight, const Tensor& y) {
  Launch l(y.device().index);
  const int64_t n = ids.numel(), c = weight.size(1);
  EmbeddingKernel<<<BlocksFor(n * c), kThreads, 0, l.stream>>>(static_cast<const int64_t*>(ids.raw_data()),
                                                               static_cast<const float*>(weight.raw_data()),
                                                               weight.size(0), n, c, static_cast<float*>(y.raw_data()));
  PSYNC_CUDA_CHECK(cudaGetLastError());
}

void EmbeddingBackward(const Tensor& grad, const Tensor& ids, const Tensor& dweight) {
  Launch l(dweight.device().index);
  const int64_t n = ids.numel(), v_rows = dweight.size(0), c = dweight.size(1);
  if (n >= INT_MAX || v_rows >= INT_MAX) {
    throw TensorError(absl::StrCat("EmbeddingBackward: ", n, " ids into ", v_rows,
                                   " rows; CUDA supports fewer than 2^31 - 1 of each"));
  }
  int end_bit = 1;  // keys are in [0, v_rows]
  while (end_bit < 31 && (int64_t{1} << end_bit) <= v_rows) ++end_bit;
  size_t sort_bytes = 0;
  PSYNC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const int*>(nullptr),
                                                   static_cast<int*>(nullptr), static_cast<const int*>(nullptr),
                                                   static_cast<int*>(nullptr), static_cast<int>(n), 0, end_bit,
                                                   l.stream));
  // One pool buffer, freed on the compute stream after the last kernel:
  // keys, sorted keys, positions, sorted positions [n each], run starts and
  // ends [v_rows each], CUB's temporary storage.
  const size_t ids_bytes = AlignUp(static_cast<size_t>(n) * sizeof(int));
  const size_t rows_bytes = AlignUp(static_cast<size_t>(v_rows) * sizeof(int));
  char* scratch = nullptr;
  PSYNC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&scratch), 4 * ids_bytes + 2 * rows_bytes + sort_bytes,
                                   l.stream));
  int* keys = reinterpret_cast<int*>(scratch);
  int* keys_sorted = reinterpret_cast<int*>(scratch + ids_bytes);
  int* positions = reinterpret_cast<int*>(scratch + 2 * ids_bytes);
  int* positions_sorted = reinterpret_cast<int*>(scratch + 3 * ids_bytes);
  int* start = reinterpret_cast<int*>(scratch + 4 * ids_bytes);
  int* end = reinterpret_cast<int*>(scratch + 4 * ids_bytes + rows_bytes);
  void* sort_temp = scratch + 4 * ids_bytes + 2 * rows_bytes;

  EmbeddingKeysKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(static_cast<const int64_t*>(ids.raw_data()), n,
                                                               v_rows, keys, positions);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) {
    err = cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, keys, keys_sorted, positions, positions_sorted,
                                          static_cast<int>(n), 0, end_bit, l.stream);
  }
  if (err == cudaSuccess) err = cudaMemsetAsync(start, 0, 2 * rows_bytes, l.stream);  // start and end
  if (err == cudaSuccess) {
    EmbeddingRunsKernel<<<BlocksFor(n), kThreads, 0, l.stream>>>(keys_sorted, n, v_rows, start, end);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) {
    EmbeddingAccumulateKernel<<<BlocksFor(v_rows * c), kThreads, 0, l.stream>>>(
        static_cast<const float*>(grad.raw_data()), positions_sorted, start, end, v_rows, c,
        static_cast<float*>(dweight.raw_data()));
    err = cudaGetLastError();
  }
  cudaFreeAsync(scratch, l.stream);
  PSYNC_CUDA_CHECK(err);
}

}  // namespace psync::cuda
