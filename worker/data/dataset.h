// Dataset: where training and evaluation batches come from. One interface,
// one implementation per data format, chosen by --data-format through the
// registry in data/registry.h:
//
//   rows, synthetic  safetensors x [N,in], y [N,out] (F32), or seeded synthetic rows: regression
//   idx              IDX images + labels (Fashion-MNIST, gzip or raw): classification
//   tokens, bytes    llm.c .bin token shards (magic 20240520) or raw bytes (V = 256): language modelling
//
// Every rank opens the same file and computes its own batches from the
// sharding contract of the format (data/README.md, docs/cli-contract.md), so
// N ranks see exactly the examples one process on the full batch sees.
// Batches come back on the host; the trainer moves them to the device.
//
// Threads: implementations are immutable after Open and Get/Examples are
// const and thread-safe: the prefetch thread (data/prefetcher.h) prepares
// the next step's batches while the training thread trains on this one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "psync/tensor/tensor.h"

namespace psync::data {

// What the data is for; the trainer picks the loss and metrics from it.
enum class Task {
  kRegression,      // targets float [b, out]: MSE
  kClassification,  // targets int64 [b]: cross-entropy, accuracy
  kLanguageModel,   // inputs/targets int64 [b, T]: cross-entropy per position
};
const char* TaskName(Task t);

// What a model needs to size itself from the data.
struct DataInfo {
  Task task = Task::kRegression;
  Shape example_shape;      // one input: rows [in]; images [C, H, W]; tokens [T]
  int64_t num_outputs = 0;  // regression: out; classification: classes; language model: vocab size
                            // (bytes: 256; llm.c files carry none: max_token_id + 1)
  // Language model: the largest token id in this dataset's tokens (inputs
  // and targets). Ids the model's vocabulary cannot hold are the model's
  // concern: check max_token_id < vocab size before training. -1 otherwise.
  int64_t max_token_id = -1;
};

// One micro-batch on the host.
struct Batch {
  Tensor inputs;   // rows [b, in] f32; images [b, C, H, W] f32; tokens [b, T] int64
  Tensor targets;  // rows [b, out] f32; images [b] int64; tokens [b, T] int64
  int64_t size() const { return inputs.defined() ? inputs.size(0) : 0; }
};

// Which micro-batch of training: the format's sharding contract decides
// which examples it holds.
struct BatchSpec {
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
  int64_t micro = 0;         // micro-batch index within the step, < accumulate
  int64_t accumulate = 1;    // M
  int64_t global_batch = 0;  // B: examples per optimizer step over all ranks (divisible by W*M)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // One line for the start banner: "fashion-mnist train (60000 images 1x28x28, 10 classes)".
  virtual std::string Describe() const = 0;
  virtual const DataInfo& info() const = 0;
  // Examples available for Examples(): rows, images, or windows of T+1
  // tokens starting every T tokens (window i: input tok[iT : iT+T], target
  // tok[iT+1 : iT+T+1]; every token after the first is a target once).
  virtual int64_t num_examples() const = 0;
  // The training micro-batch `spec` names (global_batch / (W*M) examples).
  // A spec that breaks the geometry (B not divisible by W*M, rank or micro
  // out of range) is InvalidArgument naming the field.
  virtual absl::StatusOr<Batch> Get(const BatchSpec& spec) const = 0;
  // Examples [begin, begin + count) in order, for evaluation.
  virtual absl::StatusOr<Batch> Examples(int64_t begin, int64_t count) const = 0;
};

}  // namespace psync::data
