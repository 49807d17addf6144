// your_model: a psync-worker with a model of its own. It registers a
// residual MLP with two flags of its own, then hands over to WorkerMain: the
// program takes every psync-worker flag (checkpoints, --resume, --zero, the
// coordinator's stops) and trains --model=resmlp beside mlp, gpt and cnn.
//
//   psync-launch --nproc=2 --worker-bin=./your_model -- \
//       --model=resmlp --res-hidden=64 --res-blocks=2 --widths=32,16 --steps=50
//
// On rows (--synthetic-rows, or a rows file) the data decides the input and
// output widths (--widths' ends for synthetic rows).
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <psync/psync.h>

namespace {

using psync::autograd::Variable;

// x -> Linear(in, h) -> [h + Linear(h, h)(ReLU(Linear(h, h)(h)))] x blocks -> Linear(h, out)
class ResidualMlp : public psync::nn::Model {
 public:
  ResidualMlp(int64_t in, int64_t hidden, int64_t blocks, int64_t out, psync::Device device, uint64_t seed) {
    uint64_t s = seed;
    in_ = RegisterModule("in", std::make_shared<psync::nn::Linear>(in, hidden, device, s++));
    for (int64_t b = 0; b < blocks; ++b) {
      const std::string name = "blocks." + std::to_string(b);
      up_.push_back(RegisterModule(name + ".up", std::make_shared<psync::nn::Linear>(hidden, hidden, device, s++)));
      down_.push_back(RegisterModule(name + ".down", std::make_shared<psync::nn::Linear>(hidden, hidden, device, s++)));
    }
    out_ = RegisterModule("out", std::make_shared<psync::nn::Linear>(hidden, out, device, s++));
    describe_ = "resmlp (in=" + std::to_string(in) + ", hidden=" + std::to_string(hidden) +
                ", blocks=" + std::to_string(blocks) + ", out=" + std::to_string(out) + ")";
  }

  // `skip`: blocks left out of this forward (--skip-layer; their parameters get no gradient).
  // Children are called through operator(), which runs the forward hooks
  // (with --zero=3 they gather each layer's parameters just before it).
  Variable Forward(const Variable& x, const std::set<int>& skip) override {
    Variable h = (*in_)(x);
    for (size_t b = 0; b < up_.size(); ++b) {
      if (skip.count(static_cast<int>(b))) continue;
      h = psync::autograd::Add(h, (*down_[b])(psync::autograd::Relu((*up_[b])(h))));
    }
    return (*out_)(h);
  }

  absl::Status ValidateSkip(const std::set<int>& skip) const override {
    for (int b : skip) {
      if (b < 0 || b >= static_cast<int>(up_.size())) {
        return absl::InvalidArgumentError("--skip-layer=" + std::to_string(b) + ": resmlp has blocks 0.." +
                                          std::to_string(up_.size() - 1));
      }
    }
    return absl::OkStatus();
  }

  std::string Describe() const override { return describe_; }

 private:
  std::shared_ptr<psync::nn::Linear> in_, out_;
  std::vector<std::shared_ptr<psync::nn::Linear>> up_, down_;
  std::string describe_;
};

absl::StatusOr<std::unique_ptr<psync::nn::Model>> MakeResidualMlp(const psync::nn::ModelOptions& o) {
  PSYNC_ASSIGN_OR_RETURN(int64_t hidden, o.flags.Int("res-hidden"));
  PSYNC_ASSIGN_OR_RETURN(int64_t blocks, o.flags.Int("res-blocks"));
  if (hidden < 1) return absl::InvalidArgumentError("--res-hidden must be at least 1");
  if (blocks < 0) return absl::InvalidArgumentError("--res-blocks must be at least 0");
  if (o.input_shape.size() != 1 || o.num_classes < 1) {
    return absl::InvalidArgumentError("--model=resmlp trains on rows (--synthetic-rows or a rows file)");
  }
  return std::unique_ptr<psync::nn::Model>(
      std::make_unique<ResidualMlp>(o.input_shape[0], hidden, blocks, o.num_classes, o.device, o.seed));
}

}  // namespace

int main(int argc, char** argv) {
  psync::nn::ModelRegistration m;
  m.name = "resmlp";
  m.help = "residual MLP (--res-hidden, --res-blocks), an example of a model registered from outside psync";
  m.flags = {{"res-hidden", "64", "width of the residual blocks"}, {"res-blocks", "2", "number of residual blocks"}};
  m.factory = MakeResidualMlp;
  if (absl::Status st = psync::nn::RegisterModel(std::move(m)); !st.ok()) {
    std::fprintf(stderr, "your_model: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  return psync::runtime::WorkerMain(argc, argv);
}
