#include "worker/runtime/run_options.h"

namespace psync::runtime {

TrainOptions TrainOptionsFrom(const WorkerOptions& opt) {
  TrainOptions t;
  t.steps = opt.steps;
  t.global_batch = opt.global_batch;
  t.accumulate = opt.accumulate;
  t.block_size = opt.block_size;
  t.skip = SkipSchedule{opt.skip_layer, opt.skip_pattern};
  t.find_unused_parameters = opt.find_unused_parameters;
  t.clip_grad_norm = opt.clip_grad_norm;
  t.eval_every = opt.eval_every;
  t.eval_examples = opt.eval_examples;
  t.eval_batch = opt.eval_batch;
  t.checkpoint_every = opt.checkpoint_every;
  t.progress_every = opt.progress_every;
  t.quiet = opt.quiet;
  t.timeout = opt.timeout;
  t.coordinator_grace = opt.coordinator_grace;
  return t;
}

control::SessionOptions SessionOptionsFrom(const WorkerOptions& opt) {
  control::SessionOptions s;
  s.coordinator = opt.coordinator;
  s.token = opt.token;
  s.tls_ca = opt.tls_ca;
  s.plan_relay = opt.plan_relay;
  s.gloo_host = opt.gloo_host;
  s.job_id = opt.job_id;
  s.rank = opt.rank;
  s.world_size = opt.world_size;
  s.local_world_size = opt.local_world_size;
  s.backend = opt.backend;
  s.bucket_caps = opt.bucket_caps;
  s.timeout = opt.timeout;
  s.coordinator_grace = opt.coordinator_grace;
  s.global_batch = opt.global_batch;
  return s;
}

CheckpointOptions CheckpointOptionsFrom(const WorkerOptions& opt) {
  CheckpointOptions c;
  c.model = opt.model;
  c.dir = opt.checkpoint_dir;
  c.keep = opt.keep_checkpoints;
  c.resume = opt.resume;
  c.save_path = opt.save_path;
  c.steps = opt.steps;
  c.global_batch = opt.global_batch;
  return c;
}

ModelSpec ModelSpecFrom(const WorkerOptions& opt) {
  ModelSpec m;
  m.name = opt.model;
  m.options.seed = opt.seed;
  m.options.widths = opt.widths;
  m.options.vocab_size = opt.vocab_size;
  m.options.block_size = opt.block_size;
  m.options.flags = opt.model_flags;
  m.skip_layer = opt.skip_layer;
  m.init_path = opt.init_path;
  m.init_format = opt.init_format;
  m.precision = *nn::ParsePrecision(opt.precision);  // validated with the flags
  return m;
}

optim::OptimizerOptions OptimizerOptionsFrom(const WorkerOptions& opt) {
  optim::OptimizerOptions o;
  o.momentum = opt.momentum;
  o.weight_decay = opt.weight_decay;
  o.beta1 = opt.beta1;
  o.beta2 = opt.beta2;
  o.eps = opt.eps;
  return o;
}

}  // namespace psync::runtime
