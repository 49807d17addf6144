// job_loop: a user's own training loop on psync::control::Job with every
// DDP option a loop can ask for, for package_test.sh's `job_loop` case
// (N ranks == one process on the full batch):
//   --zero=0|1|2     ZeRO through ddp::MakeOptimizer / AttachOptimizer
//   --find-unused    a branch used only on even iterations
//   --accumulate=M   M micro-batches, the first M-1 under ddp().NoSync()
//   --start=N        every rank offers N as its first iteration (a resumed job)
//   --live           live recovery: the optimizer goes to Join; after a lost
//                    peer the loop asks Job::Rejoin and goes on (a process
//                    started again for a lost one is healed at its Join)
// Writes every parameter value ("name index value", %.9g) to --out at the end.
// Also checks that misusing Job (a Forward before BeginIteration, a skipped
// iteration) is refused without harm.
// Built against the public API only, linked with psync::psync.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <psync/psync.h>

using psync::Tensor;
using psync::autograd::Variable;

namespace {

struct Flags {
  std::string coordinator, out;
  int64_t steps = 12, global_batch = 16, accumulate = 1, start = 0;
  int zero = 0;
  bool find_unused = false, live = false;
};

// fc2(relu(fc1(x))), plus side(x) where asked (a branch only some
// iterations use: it exists only with --find-unused).
class Net : public psync::nn::Module {
 public:
  explicit Net(bool has_side) {
    fc1_ = RegisterModule("fc1", std::make_shared<psync::nn::Linear>(6, 16, psync::Device::CPU(), 1));
    fc2_ = RegisterModule("fc2", std::make_shared<psync::nn::Linear>(16, 2, psync::Device::CPU(), 2));
    if (has_side) side_ = RegisterModule("side", std::make_shared<psync::nn::Linear>(6, 2, psync::Device::CPU(), 3));
  }
  Variable Forward(const Variable& x) override { return Forward(x, false); }
  Variable Forward(const Variable& x, bool with_side) {
    Variable y = fc2_->Forward(psync::autograd::Relu(fc1_->Forward(x)));
    return with_side ? psync::autograd::Add(y, side_->Forward(x)) : y;
  }

 private:
  std::shared_ptr<psync::nn::Linear> fc1_, fc2_, side_;
};

// Rows [first, first + n) of iteration `it`'s global batch; y = (sum x, x0 - x1).
void Rows(int64_t it, int64_t first, int64_t n, Tensor* x, Tensor* y) {
  std::vector<float> xs, ys;
  for (int64_t r = first; r < first + n; ++r) {
    float v[6], sum = 0;
    for (int c = 0; c < 6; ++c) {
      const uint64_t h = (static_cast<uint64_t>(it) * 7919u + static_cast<uint64_t>(r) * 6u + c) * 0x9E3779B97F4A7C15ull;
      v[c] = static_cast<float>(h >> 40) / static_cast<float>(1 << 24) * 2 - 1;
      xs.push_back(v[c]);
      sum += v[c];
    }
    ys.push_back(sum);
    ys.push_back(v[0] - v[1]);
  }
  *x = Tensor::FromVector(xs, {n, 6});
  *y = Tensor::FromVector(ys, {n, 2});
}

absl::Status Run(const Flags& f) {
  psync::control::JobOptions options;
  options.session.coordinator = f.coordinator;
  options.ddp.zero_stage = f.zero;
  options.ddp.find_unused_parameters = f.find_unused;
  options.start.start_iteration = f.start;
  auto model = std::make_shared<Net>(f.find_unused);
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<psync::optim::Optimizer> opt,
                         psync::ddp::MakeOptimizer("adamw", {}, model->named_parameters(),
                                                   psync::nn::PrecisionPolicy::Fp32(), f.zero));
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<psync::control::Job> job,
                         psync::control::Job::Join(options, model, f.live ? opt.get() : nullptr));
  PSYNC_RETURN_IF_ERROR(psync::ddp::AttachOptimizer(*opt, job->ddp()));
  // Misuse is an error that changes nothing, never a hang or an abort.
  if (job->Forward([] { return Variable(); }).status().code() != absl::StatusCode::kFailedPrecondition ||
      job->BeginIteration(job->start_iteration() + 1).status().code() != absl::StatusCode::kFailedPrecondition) {
    return absl::InternalError("Job took a Forward before BeginIteration, or a skipped iteration");
  }
  // One iteration: false when the coordinator stopped the job before it.
  auto iteration = [&](int64_t it) -> absl::StatusOr<bool> {
    PSYNC_ASSIGN_OR_RETURN(bool go, job->BeginIteration(it));
    if (!go) return false;
    const int64_t per_rank = f.global_batch / job->world_size(), micro = per_rank / f.accumulate;
    const bool side = f.find_unused && it % 2 == 0;
    for (int64_t m = 0; m < f.accumulate; ++m) {
      std::unique_ptr<psync::ddp::NoSync> guard;
      if (m + 1 < f.accumulate) guard = std::make_unique<psync::ddp::NoSync>(job->ddp().NoSync());
      Tensor x, y;
      Rows(it, job->rank() * per_rank + m * micro, micro, &x, &y);
      PSYNC_ASSIGN_OR_RETURN(Variable loss, job->Forward([&] {
        return psync::autograd::Scale(psync::nn::MseLoss(model->Forward(Variable(x), side), y),
                                      1.0f / static_cast<float>(f.accumulate));
      }));
      PSYNC_RETURN_IF_ERROR(psync::autograd::Backward(loss));
    }
    PSYNC_RETURN_IF_ERROR(opt->Step(0.01));
    opt->ZeroGrad(/*set_to_none=*/true);
    return true;
  };
  for (int64_t it = job->start_iteration(); it < f.steps; ++it) {
    absl::StatusOr<bool> go = iteration(it);
    if (go.ok() && !*go) break;
    if (go.ok()) continue;
    // A lost peer: stay if the coordinator asks, from the job's newest step.
    PSYNC_ASSIGN_OR_RETURN(bool again, job->Rejoin(go.status(), /*steps_completed=*/it));
    if (!again) return job->Finish(go.status());
    std::fprintf(stderr, "job_loop: rank %d rejoined at iteration %lld\n", job->rank(),
                 static_cast<long long>(job->start_iteration()));
    PSYNC_RETURN_IF_ERROR(psync::ddp::AttachOptimizer(*opt, job->ddp()));
    it = job->start_iteration() - 1;
  }
  PSYNC_RETURN_IF_ERROR(job->Finish(absl::OkStatus()));
  if (job->rank() == 0 && !f.out.empty()) {
    FILE* out = std::fopen(f.out.c_str(), "w");
    if (out == nullptr) return absl::NotFoundError("cannot write --out=" + f.out);
    for (const auto& [name, p] : model->named_parameters()) {
      const std::vector<float> v = p.data().ToVector<float>();
      for (size_t i = 0; i < v.size(); ++i) std::fprintf(out, "%s %zu %.9g\n", name.c_str(), i, v[i]);
    }
    std::fclose(out);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](const char* name) { return a.substr(std::string(name).size()); };
    if (a.rfind("--coordinator=", 0) == 0) f.coordinator = val("--coordinator=");
    else if (a.rfind("--out=", 0) == 0) f.out = val("--out=");
    else if (a.rfind("--steps=", 0) == 0) f.steps = std::atoll(val("--steps=").c_str());
    else if (a.rfind("--zero=", 0) == 0) f.zero = std::atoi(val("--zero=").c_str());
    else if (a.rfind("--accumulate=", 0) == 0) f.accumulate = std::atoll(val("--accumulate=").c_str());
    else if (a.rfind("--start=", 0) == 0) f.start = std::atoll(val("--start=").c_str());
    else if (a == "--find-unused") f.find_unused = true;
    else if (a == "--live") f.live = true;
    else { std::fprintf(stderr, "job_loop: unknown argument %s\n", argv[i]); return 2; }
  }
  const absl::Status st = Run(f);
  if (!st.ok()) std::fprintf(stderr, "job_loop: %s\n", std::string(st.message()).c_str());
  return st.ok() ? 0 : psync::ExitCodeOf(st, 1);
}
