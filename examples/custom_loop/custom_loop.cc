// custom_loop: the smallest complete data-parallel program with its own loop.
// Each rank trains a small MLP on its half of every batch of y = sum(x);
// psync averages the gradients, and the coordinator stops both ranks at the
// same iteration (psyncctl shutdown).
//
//   psync-coordinator --port=29500 --world-size=2 &
//   custom_loop --coordinator=127.0.0.1:29500 &
//   custom_loop --coordinator=127.0.0.1:29500 &
//   psyncctl --coordinator=127.0.0.1:29500 shutdown
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <psync/psync.h>

using psync::Tensor;
using psync::autograd::Variable;

// Linear(8, 32) -> ReLU -> Linear(32, 1).
class Net : public psync::nn::Module {
 public:
  Net() {
    fc1_ = RegisterModule("fc1", std::make_shared<psync::nn::Linear>(8, 32, psync::Device::CPU(), /*seed=*/1));
    fc2_ = RegisterModule("fc2", std::make_shared<psync::nn::Linear>(32, 1, psync::Device::CPU(), /*seed=*/2));
  }
  Variable Forward(const Variable& x) override { return fc2_->Forward(psync::autograd::Relu(fc1_->Forward(x))); }

 private:
  std::shared_ptr<psync::nn::Linear> fc1_, fc2_;
};

// Rows [rank*b, (rank+1)*b) of iteration `it`'s global batch: x uniform in [-1, 1), y = sum(x).
void Batch(int64_t it, int rank, int64_t b, Tensor* x, Tensor* y) {
  std::vector<float> xs, ys;
  for (int64_t r = rank * b; r < (rank + 1) * b; ++r) {
    float sum = 0;
    for (int64_t c = 0; c < 8; ++c) {
      const uint64_t h = (static_cast<uint64_t>(it) * 1000003u + r * 8 + c) * 0x9E3779B97F4A7C15ull;
      const float v = static_cast<float>(h >> 40) / static_cast<float>(1 << 24) * 2 - 1;
      xs.push_back(v);
      sum += v;
    }
    ys.push_back(sum);
  }
  *x = Tensor::FromVector(xs, {b, 8});
  *y = Tensor::FromVector(ys, {b, 1});
}

absl::Status Train(const std::string& coordinator, int64_t steps) {
  psync::control::JobOptions options;
  options.session.coordinator = coordinator;
  auto model = std::make_shared<Net>();
  PSYNC_ASSIGN_OR_RETURN(std::unique_ptr<psync::control::Job> job, psync::control::Job::Join(options, model));
  psync::optim::SGD sgd(model->named_parameters(), {});
  const int64_t per_rank = 32 / job->world_size();
  for (int64_t it = job->start_iteration(); it < steps; ++it) {
    PSYNC_ASSIGN_OR_RETURN(bool go, job->BeginIteration(it));
    if (!go) {
      std::printf("custom_loop rank %d: stopped by the coordinator before iteration %lld\n", job->rank(),
                  static_cast<long long>(it));
      break;
    }
    Tensor x, y;
    Batch(it, job->rank(), per_rank, &x, &y);
    PSYNC_ASSIGN_OR_RETURN(Variable loss, job->Forward([&] { return psync::nn::MseLoss(model->Forward(Variable(x)), y); }));
    PSYNC_RETURN_IF_ERROR(psync::autograd::Backward(loss));  // gradients averaged over the ranks
    PSYNC_RETURN_IF_ERROR(sgd.Step(/*lr=*/0.05));
    sgd.ZeroGrad();
    if (it % 100 == 0) {
      std::printf("custom_loop rank %d: iteration %lld loss %.5f\n", job->rank(), static_cast<long long>(it),
                  loss.data().Item());
      std::fflush(stdout);
    }
  }
  return job->Finish(absl::OkStatus());
}

int main(int argc, char** argv) {
  std::string coordinator = "127.0.0.1:29500";
  int64_t steps = 1000000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--coordinator=", 0) == 0) coordinator = a.substr(14);
    else if (a.rfind("--steps=", 0) == 0) steps = std::atoll(a.c_str() + 8);
    else { std::fprintf(stderr, "custom_loop: unknown argument '%s' (--coordinator=HOST:PORT --steps=N)\n", argv[i]); return 2; }
  }
  const absl::Status st = Train(coordinator, steps);
  if (!st.ok()) std::fprintf(stderr, "custom_loop: %s\n", std::string(st.message()).c_str());
  return st.ok() ? 0 : psync::ExitCodeOf(st, 1);
}
