// The GPT's (with the fused causal attention) and the CNN's layers against
// PyTorch 1.13 in float64: psync computes each
// layer's output and the gradients of sum(out * g) through the autograd
// engine; a python script (Debian's /usr/bin/python3 with python3-torch)
// computes the same with torch.nn.functional on the same inputs, read from
// raw float64 files. Skips when torch cannot be imported.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/autograd/gradcheck.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/nn_functions.h"
#include "psync/tensor/ops.h"

namespace psync::autograd {
namespace {

using testing::RandomDouble;

bool HaveTorch() { return test_support::SpawnAndCapture({"/usr/bin/python3", "-c", "import torch"}).code == 0; }

void WriteDoubles(const std::string& path, const Tensor& t) {
  const std::vector<double> v = t.To(kFloat64).ToVector<double>();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
  ASSERT_TRUE(f.good()) << path;
}

std::vector<double> ReadDoubles(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(double));
  return v;
}

// Reads <name>.bin (float64, shapes fixed below), computes every layer and
// the gradients of sum(out * g) with torch, writes <name>.out.bin files.
constexpr char kScript[] = R"PY(
import sys, math, numpy as np, torch
import torch.nn.functional as F
torch.set_default_dtype(torch.float64)
d = sys.argv[1]
def load(name, shape, grad=False):
    t = torch.from_numpy(np.fromfile(f"{d}/{name}.bin", dtype=np.float64).reshape(shape)).clone()
    return t.requires_grad_(grad)
def save(name, t):
    t.detach().numpy().astype(np.float64).tofile(f"{d}/{name}.out.bin")
B, T, C, V, H = 3, 5, 6, 7, 2
# Embedding with repeated ids.
ids = load("ids", (B, T)).long()
wte = load("wte", (V, C), True)
y = F.embedding(ids, wte); g = load("g_emb", (B, T, C))
(y * g).sum().backward(); save("emb_y", y); save("emb_dw", wte.grad)
# LayerNorm.
x = load("ln_x", (B, T, C), True); w = load("ln_w", (C,), True); b = load("ln_b", (C,), True)
y = F.layer_norm(x, (C,), w, b, 1e-5); g = load("g_ln", (B, T, C))
(y * g).sum().backward()
for n, t in [("ln_y", y), ("ln_dx", x.grad), ("ln_dw", w.grad), ("ln_db", b.grad)]: save(n, t)
# GELU, tanh form.
x = load("gelu_x", (B, T, 4 * C), True)
y = F.gelu(x, approximate="tanh"); g = load("g_gelu", (B, T, 4 * C))
(y * g).sum().backward(); save("gelu_y", y); save("gelu_dx", x.grad)
# Causal softmax of scaled scores, as in GPT attention.
s = load("sm_s", (B, H, T, T), True); scale = 1.0 / math.sqrt(C // H)
mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
y = F.softmax((s * scale).masked_fill(~mask, float("-inf")), dim=-1); g = load("g_sm", (B, H, T, T))
(y * g).sum().backward(); save("sm_y", y); save("sm_ds", s.grad)
# Causal attention (psync's fused CausalAttention), T = 70: two 64-row tiles.
TA, D = 70, 4
q = load("at_q", (B, H, TA, D), True); k = load("at_k", (B, H, TA, D), True); v = load("at_v", (B, H, TA, D), True)
mask = torch.tril(torch.ones(TA, TA, dtype=torch.bool))
p = F.softmax((q @ k.transpose(-2, -1) * 0.6).masked_fill(~mask, float("-inf")), dim=-1)
y = p @ v; (y * load("g_at", (B, H, TA, D))).sum().backward()
for n, t in [("at_y", y), ("at_dq", q.grad), ("at_dk", k.grad), ("at_dv", v.grad)]: save(n, t)
print("ok")
)PY";

TEST(NnFunctionsTorch, LayersMatchPyTorchInFloat64) {
  if (!HaveTorch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch (apt-get install python3-torch)";
  test_support::TempDir dir("psync_nn_torch");
  const int64_t B = 3, T = 5, C = 6, V = 7, H = 2;
  const Tensor ids = Tensor::FromVector(std::vector<int64_t>{6, 0, 6, 2, 2, 1, 6, 3, 3, 3, 0, 0, 5, 6, 4}, {B, T});
  std::map<std::string, Tensor> in = {
      {"wte", RandomDouble({V, C}, 1)},
      {"g_emb", RandomDouble({B, T, C}, 2)},
      {"ln_x", RandomDouble({B, T, C}, 3, -2, 3)},
      {"ln_w", RandomDouble({C}, 4, 0.5, 1.5)},
      {"ln_b", RandomDouble({C}, 5)},
      {"g_ln", RandomDouble({B, T, C}, 6)},
      {"gelu_x", RandomDouble({B, T, 4 * C}, 7, -5, 5)},
      {"g_gelu", RandomDouble({B, T, 4 * C}, 8)},
      {"sm_s", RandomDouble({B, H, T, T}, 9, -3, 3)},
      {"g_sm", RandomDouble({B, H, T, T}, 10)},
      {"at_q", RandomDouble({B, H, 70, 4}, 11, -2, 2)},
      {"at_k", RandomDouble({B, H, 70, 4}, 12, -2, 2)},
      {"at_v", RandomDouble({B, H, 70, 4}, 13)},
      {"g_at", RandomDouble({B, H, 70, 4}, 14)},
  };
  in["ids"] = ids.To(kFloat64);
  for (const auto& [name, t] : in) WriteDoubles(dir.File(name + ".bin"), t);
  const std::string script = dir.File("layers.py");
  {
    std::ofstream f(script);
    f << kScript;
  }
  test_support::SpawnResult r =
      test_support::SpawnAndCapture({"/usr/bin/python3", script, dir.path()}, std::chrono::seconds(120));
  ASSERT_EQ(r.code, 0) << r.output;

  std::map<std::string, Tensor> got;
  auto grad_of = [](const Variable& out, const Tensor& g, std::vector<Variable> leaves) {
    EXPECT_TRUE(Backward(Sum(Mul(out, Variable(g)))).ok());
    std::vector<Tensor> grads;
    for (const Variable& v : leaves) grads.push_back(v.grad());
    return grads;
  };
  {
    Variable wte(in["wte"], true, "wte");
    Variable y = Embedding(ids, wte);
    got["emb_y"] = y.data();
    got["emb_dw"] = grad_of(y, in["g_emb"], {wte})[0];
  }
  {
    Variable x(in["ln_x"], true, "x"), w(in["ln_w"], true, "w"), b(in["ln_b"], true, "b");
    Variable y = LayerNorm(x, w, b);
    got["ln_y"] = y.data();
    std::vector<Tensor> g = grad_of(y, in["g_ln"], {x, w, b});
    got["ln_dx"] = g[0];
    got["ln_dw"] = g[1];
    got["ln_db"] = g[2];
  }
  {
    Variable x(in["gelu_x"], true, "x");
    Variable y = Gelu(x);
    got["gelu_y"] = y.data();
    got["gelu_dx"] = grad_of(y, in["g_gelu"], {x})[0];
  }
  {
    Variable s(in["sm_s"], true, "s");
    Variable y = CausalSoftmax(s, 1.0 / std::sqrt(static_cast<double>(C / H)));
    got["sm_y"] = y.data();
    got["sm_ds"] = grad_of(y, in["g_sm"], {s})[0];
  }
  {
    Variable q(in["at_q"], true, "q"), k(in["at_k"], true, "k"), v(in["at_v"], true, "v");
    Variable y = CausalAttention(q, k, v, 0.6);
    got["at_y"] = y.data().Contiguous();
    std::vector<Tensor> g = grad_of(y, in["g_at"], {q, k, v});
    got["at_dq"] = g[0].Contiguous();
    got["at_dk"] = g[1].Contiguous();
    got["at_dv"] = g[2].Contiguous();
  }
  for (const auto& [name, t] : got) {
    const std::vector<double> want = ReadDoubles(dir.File(name + ".out.bin"));
    const std::vector<double> have = t.ToVector<double>();
    ASSERT_EQ(have.size(), want.size()) << name;
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(have[i] - want[i]) / (1 + std::fabs(want[i])));
    std::printf("%-8s max |psync - torch| / (1 + |torch|) = %.3g over %zu values\n", name.c_str(), worst, want.size());
    EXPECT_LE(worst, 1e-13) << name << " differs from PyTorch";
  }
}

// Reads the CNN inputs (float64), computes conv2d (3x3 "same" with bias;
// 3x2 at stride 2 without padding or bias) and max_pool2d (2x2, with its
// indices) and the gradients of sum(out * g) with torch.
constexpr char kCnnScript[] = R"PY(
import sys, numpy as np, torch
import torch.nn.functional as F
torch.set_default_dtype(torch.float64)
d = sys.argv[1]
def load(name, shape, grad=False):
    t = torch.from_numpy(np.fromfile(f"{d}/{name}.bin", dtype=np.float64).reshape(shape)).clone()
    return t.requires_grad_(grad)
def save(name, t):
    t.detach().numpy().astype(np.float64).tofile(f"{d}/{name}.out.bin")
x = load("c1_x", (3, 2, 7, 6), True); w = load("c1_w", (4, 2, 3, 3), True); b = load("c1_b", (4,), True)
y = F.conv2d(x, w, b, stride=1, padding=1); (y * load("g_c1", (3, 4, 7, 6))).sum().backward()
for n, t in [("c1_y", y), ("c1_dx", x.grad), ("c1_dw", w.grad), ("c1_db", b.grad)]: save(n, t)
x = load("c2_x", (2, 3, 9, 8), True); w = load("c2_w", (5, 3, 3, 2), True)
y = F.conv2d(x, w, None, stride=2, padding=0); (y * load("g_c2", (2, 5, 4, 4))).sum().backward()
for n, t in [("c2_y", y), ("c2_dx", x.grad), ("c2_dw", w.grad)]: save(n, t)
x = load("mp_x", (2, 3, 7, 8), True)
y, idx = F.max_pool2d(x, 2, return_indices=True); (y * load("g_mp", (2, 3, 3, 4))).sum().backward()
save("mp_y", y); save("mp_idx", idx.double()); save("mp_dx", x.grad)
print("ok")
)PY";

TEST(NnFunctionsTorch, CnnLayersMatchPyTorchInFloat64) {
  if (!HaveTorch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch (apt-get install python3-torch)";
  test_support::TempDir dir("psync_cnn_torch");
  std::map<std::string, Tensor> in = {
      {"c1_x", RandomDouble({3, 2, 7, 6}, 20)}, {"c1_w", RandomDouble({4, 2, 3, 3}, 21)},
      {"c1_b", RandomDouble({4}, 22)},          {"g_c1", RandomDouble({3, 4, 7, 6}, 23)},
      {"c2_x", RandomDouble({2, 3, 9, 8}, 24)}, {"c2_w", RandomDouble({5, 3, 3, 2}, 25)},
      {"g_c2", RandomDouble({2, 5, 4, 4}, 26)}, {"mp_x", RandomDouble({2, 3, 7, 8}, 27)},
      {"g_mp", RandomDouble({2, 3, 3, 4}, 28)},
  };
  for (const auto& [name, t] : in) WriteDoubles(dir.File(name + ".bin"), t);
  const std::string script = dir.File("cnn.py");
  {
    std::ofstream f(script);
    f << kCnnScript;
  }
  test_support::SpawnResult r =
      test_support::SpawnAndCapture({"/usr/bin/python3", script, dir.path()}, std::chrono::seconds(120));
  ASSERT_EQ(r.code, 0) << r.output;

  std::map<std::string, Tensor> got;
  auto grads_of = [](const Variable& out, const Tensor& g, const std::vector<Variable>& leaves) {
    EXPECT_TRUE(Backward(Sum(Mul(out, Variable(g)))).ok());
    std::vector<Tensor> grads;
    for (const Variable& v : leaves) grads.push_back(v.grad());
    return grads;
  };
  {
    Variable x(in["c1_x"], true, "x"), w(in["c1_w"], true, "w"), b(in["c1_b"], true, "b");
    Variable y = Conv2d(x, w, b, 1, 1);
    got["c1_y"] = y.data();
    std::vector<Tensor> g = grads_of(y, in["g_c1"], {x, w, b});
    got["c1_dx"] = g[0];
    got["c1_dw"] = g[1];
    got["c1_db"] = g[2];
  }
  {
    Variable x(in["c2_x"], true, "x"), w(in["c2_w"], true, "w");
    Variable y = Conv2d(x, w, Variable(), 2, 0);
    got["c2_y"] = y.data();
    std::vector<Tensor> g = grads_of(y, in["g_c2"], {x, w});
    got["c2_dx"] = g[0];
    got["c2_dw"] = g[1];
  }
  {
    Variable x(in["mp_x"], true, "x");
    got["mp_idx"] = ops::MaxPool2d(x.data(), 2).indices;
    Variable y = MaxPool2d(x, 2);
    got["mp_y"] = y.data();
    got["mp_dx"] = grads_of(y, in["g_mp"], {x})[0];
  }
  for (const auto& [name, t] : got) {
    const std::vector<double> want = ReadDoubles(dir.File(name + ".out.bin"));
    const std::vector<double> have = t.To(kFloat64).ToVector<double>();
    ASSERT_EQ(have.size(), want.size()) << name;
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(have[i] - want[i]) / (1 + std::fabs(want[i])));
    std::printf("%-8s max |psync - torch| / (1 + |torch|) = %.3g over %zu values\n", name.c_str(), worst, want.size());
    // Pooling selects and routes values: exact. Convolutions sum in another order than torch's.
    EXPECT_LE(worst, name.rfind("mp_", 0) == 0 ? 0.0 : 1e-13) << name << " differs from PyTorch";
  }
}

}  // namespace
}  // namespace psync::autograd
