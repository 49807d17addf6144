// --model=cnn against the same network in PyTorch 1.13, float32: psync
// builds the CNN, runs forward, cross-entropy and backward on a batch; a
// python script (Debian's /usr/bin/python3 with python3-torch) declares
// the torch.nn module with the same layers, loads psync's initial weights
// by name, and does the same. Logits, loss and every gradient must agree to
// 1e-5 (relative to 1 + |torch|), and the parameter names and order must be
// torch's state_dict order. Skips when torch cannot be imported.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "psync/autograd/engine.h"
#include "psync/nn/loss.h"
#include "worker/nn/models/cnn.h"

namespace psync::nn {
namespace {

bool HaveTorch() { return test_support::SpawnAndCapture({"/usr/bin/python3", "-c", "import torch"}).code == 0; }

void WriteRaw(const std::string& path, const Tensor& t) {
  const Tensor c = t.Contiguous();
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(c.raw_data()), static_cast<std::streamsize>(c.nbytes()));
  ASSERT_TRUE(f.good()) << path;
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadText(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// argv: dir C H W c1 c2 classes batch. Reads params/<name>.bin, x.bin,
// y.bin; writes names.txt (state_dict order), logits.out, loss.out and
// <name>.grad.out (float32).
constexpr char kScript[] = R"PY(
import sys, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1)
d = sys.argv[1]
C, H, W, c1, c2, classes, batch = map(int, sys.argv[2:])
class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(C, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.fc = nn.Linear(c2 * (H // 2 // 2) * (W // 2 // 2), classes)
    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))
m = CNN()
sd = m.state_dict()
with open(f"{d}/names.txt", "w") as f:
    f.write(" ".join(f"{k}:{'x'.join(map(str, v.shape))}" for k, v in sd.items()))
m.load_state_dict({k: torch.from_numpy(np.fromfile(f"{d}/{k}.bin", dtype=np.float32).reshape(v.shape))
                   for k, v in sd.items()})
x = torch.from_numpy(np.fromfile(f"{d}/x.bin", dtype=np.float32).reshape(batch, C, H, W))
y = torch.from_numpy(np.fromfile(f"{d}/y.bin", dtype=np.int64))
logits = m(x)
loss = F.cross_entropy(logits, y)
loss.backward()
logits.detach().numpy().tofile(f"{d}/logits.out")
loss.detach().reshape(1).numpy().tofile(f"{d}/loss.out")
for k, p in m.named_parameters():
    p.grad.numpy().tofile(f"{d}/{k}.grad.out")
print("ok")
)PY";

struct Config {
  Shape image;  // [C, H, W]
  std::vector<int64_t> channels;
  int64_t classes, batch;
};

void CompareWithTorch(const Config& cfg) {
  const std::string what = absl::StrCat("image ", ShapeToString(cfg.image), " channels ",
                                        absl::StrJoin(cfg.channels, ","), " batch ", cfg.batch);
  test_support::TempDir dir("psync_cnn_torch");
  CNN cnn(cfg.image, cfg.classes, cfg.channels, Device::CPU(), /*seed=*/5);
  std::vector<std::string> names;
  for (const auto& [name, p] : cnn.named_parameters()) {
    names.push_back(absl::StrCat(name, ":", absl::StrJoin(p.shape(), "x")));
    WriteRaw(dir.File(name + ".bin"), p.data());
  }
  // Images in [0, 1) like normalised pixels; labels cover every class.
  Shape xs = {cfg.batch};
  xs.insert(xs.end(), cfg.image.begin(), cfg.image.end());
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> xv(static_cast<size_t>(NumelOf(xs)));
  for (float& v : xv) v = pixel(gen);
  std::vector<int64_t> yv(static_cast<size_t>(cfg.batch));
  for (int64_t i = 0; i < cfg.batch; ++i) yv[static_cast<size_t>(i)] = (i * 3 + 1) % cfg.classes;
  const Tensor x = Tensor::FromVector(xv, xs), y = Tensor::FromVector(yv, {cfg.batch});
  WriteRaw(dir.File("x.bin"), x);
  WriteRaw(dir.File("y.bin"), y);
  const std::string script = dir.File("cnn.py");
  {
    std::ofstream f(script);
    f << kScript;
  }
  std::vector<std::string> argv = {"/usr/bin/python3", script, dir.path()};
  for (int64_t v : {cfg.image[0], cfg.image[1], cfg.image[2], cfg.channels[0], cfg.channels[1], cfg.classes,
                    cfg.batch}) {
    argv.push_back(std::to_string(v));
  }
  test_support::SpawnResult r = test_support::SpawnAndCapture(argv, std::chrono::seconds(120));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(absl::StrJoin(names, " "), ReadText(dir.File("names.txt"))) << what << ": names, shapes or order differ";

  Variable logits = cnn.Forward(Variable(x));
  Variable loss = nn::CrossEntropyLoss(logits, y);
  ASSERT_TRUE(autograd::Backward(loss).ok());
  auto compare = [&](const std::string& name, const Tensor& have_t, const std::string& file) {
    const std::vector<float> want = ReadFloats(dir.File(file)), have = have_t.ToVector();
    ASSERT_EQ(have.size(), want.size()) << what << " " << name;
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(have[i]) - want[i]) / (1 + std::fabs(want[i])));
    }
    std::printf("%-18s max |psync - torch| / (1 + |torch|) = %.3g over %zu values\n", name.c_str(), worst, want.size());
    EXPECT_LE(worst, 1e-5) << what << ": " << name << " differs from PyTorch";
  };
  compare("logits", logits.data(), "logits.out");
  compare("loss", loss.data(), "loss.out");
  for (const auto& [name, p] : cnn.named_parameters()) compare(name + ".grad", p.grad(), name + ".grad.out");
}

TEST(CnnTorch, DefaultCnnMatchesPyTorch) {
  if (!HaveTorch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch (apt-get install python3-torch)";
  CompareWithTorch({{1, 28, 28}, {16, 32}, 10, 32});  // Fashion-MNIST's shapes
}

TEST(CnnTorch, OddSizesAndChannelsMatchPyTorch) {
  if (!HaveTorch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch (apt-get install python3-torch)";
  CompareWithTorch({{3, 30, 29}, {4, 8}, 7, 5});  // pools floor: 15x14, then 7x7
}

}  // namespace
}  // namespace psync::nn
