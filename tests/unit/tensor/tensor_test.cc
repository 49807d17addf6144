// Device, Storage and Tensor basics (CPU; CUDA only for "no device" errors).
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/tensor/test_util.h"
#include "psync/tensor/device.h"
#include "psync/tensor/tensor.h"

namespace psync {
namespace {

using ::psync::testing::ExpectTensorError;

TEST(Device, ToStringAndParse) {
  EXPECT_EQ(Device::CPU().ToString(), "cpu");
  EXPECT_EQ(Device::CUDA(3).ToString(), "cuda:3");
  EXPECT_EQ(*ParseDevice("cpu"), Device::CPU());
  EXPECT_EQ(*ParseDevice("cuda"), Device::CUDA(0));
  EXPECT_EQ(*ParseDevice("cuda:2"), Device::CUDA(2));
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:x", "CPU", "cuda:1x", "cuda:+1"}) {
    auto d = ParseDevice(bad);
    EXPECT_FALSE(d.ok()) << bad;
    if (!d.ok()) {
      EXPECT_NE(std::string(d.status().message()).find("expected cpu, cuda or cuda:N"),
                std::string::npos);
    }
  }
  EXPECT_NE(Device::CPU(), Device::CUDA(0));
  EXPECT_NE(Device::CUDA(0), Device::CUDA(1));
  EXPECT_EQ((Device{DeviceType::kCPU, 5}), Device::CPU());  // CPU index is ignored
}

TEST(Device, CudaAvailabilityNeverCrashes) {
  const int n = CudaDeviceCount();
  EXPECT_EQ(CudaDeviceCount(), n);  // the same answer every time
  if (!BuiltWithCuda()) EXPECT_EQ(n, 0);
  // Every device below the count is usable; the one past it is not (below).
  for (int d = 0; d < n; ++d) EXPECT_TRUE(CheckDeviceAvailable(Device::CUDA(d)).ok()) << "cuda:" << d;
  EXPECT_TRUE(CheckDeviceAvailable(Device::CPU()).ok());
  absl::Status st = CheckDeviceAvailable(Device::CUDA(n));  // one past the last
  ASSERT_FALSE(st.ok());
  const std::string msg(st.message());
  EXPECT_NE(msg.find("cuda:" + std::to_string(n)), std::string::npos) << msg;
  if (!BuiltWithCuda()) {
    EXPECT_NE(msg.find("built without CUDA support"), std::string::npos) << msg;
  } else if (n == 0) {
    EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
  }
  if (n == 0) {
    // Allocating on a missing GPU is an exception with the same reason, not a crash.
    ExpectTensorError([] { Tensor::Zeros({2, 2}, Device::CUDA(0)); }, {"cuda:0"});
    ExpectTensorError([] { Tensor::Zeros({2}).To(Device::CUDA(0)); }, {"cuda:0"});
  }
}

TEST(Storage, CpuAlignmentAndSize) {
  for (size_t nbytes : {size_t{0}, size_t{1}, size_t{4}, size_t{63}, size_t{64}, size_t{1000}}) {
    auto s = Storage::Allocate(nbytes, Device::CPU());
    ASSERT_NE(s->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % 64, 0u) << nbytes;
    EXPECT_EQ(s->nbytes(), nbytes);
    EXPECT_EQ(s->device(), Device::CPU());
  }
}

// A detached storage (ZeRO-3's parameters): views made while it has no
// memory read the memory lent later, and a read while unbound throws a
// TensorError naming what and why, never touching freed memory.
TEST(Storage, DetachedReadsWhatIsLentAndNamesItWhenNot) {
  auto s = Storage::Detached(4 * sizeof(float), Device::CPU(), "the parameters of bucket 7", "not gathered now");
  EXPECT_FALSE(s->bound());
  Tensor whole = Tensor::FromStorage(s, {4}, kFloat32);
  Tensor tail = whole.View(2, {2});  // made while unbound: no read
  ExpectTensorError([&] { (void)tail.ToVector(); }, {"the parameters of bucket 7", "not gathered now"});
  Tensor lent = Tensor::FromVector({1, 2, 3, 4, 5}, {5});
  s->Bind(lent.storage());
  EXPECT_TRUE(s->bound());
  EXPECT_EQ(tail.ToVector(), (std::vector<float>{3, 4}));
  s->Unbind();
  ExpectTensorError([&] { (void)whole.ToVector(); }, {"bucket 7"});
  // Memory that is too small is refused; a plain storage cannot be rebound.
  EXPECT_THROW(s->Bind(Tensor::Zeros({3}).storage()), std::logic_error);
  EXPECT_THROW(lent.storage()->Unbind(), std::logic_error);
  s->Bind(Tensor::Full({4}, 6.0f).storage());
  EXPECT_EQ(whole.ToVector(), (std::vector<float>{6, 6, 6, 6}));
}

TEST(Tensor, FactoriesAndAccessors) {
  Tensor undefined;
  EXPECT_FALSE(undefined.defined());
  EXPECT_EQ(undefined.DebugString(), "Tensor(undefined)");

  Tensor z = Tensor::Zeros({2, 3});
  EXPECT_TRUE(z.defined());
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.nbytes(), 24u);
  EXPECT_EQ(z.size(0), 2);
  EXPECT_EQ(z.size(-1), 3);
  EXPECT_EQ(z.device(), Device::CPU());
  EXPECT_EQ(z.ToVector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(z.DebugString(), "Tensor[2, 3] float32 cpu");

  EXPECT_EQ(Tensor::Full({4}, 2.5f).ToVector(), std::vector<float>(4, 2.5f));
  Tensor s = Tensor::Scalar(7.0f);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.Item(), 7.0f);
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(ShapeToString({2, 3}), "[2, 3]");
  EXPECT_EQ(NumelOf({}), 1);
  EXPECT_EQ(NumelOf({4, 0}), 0);

  Tensor e = Tensor::Empty({0, 5});
  EXPECT_TRUE(e.defined());
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.ToVector().empty());
}

TEST(Tensor, ViewsShareStorage) {
  Tensor flat = Tensor::FromVector({0, 1, 2, 3, 4, 5, 6, 7}, {8});
  Tensor a = flat.View(2, {2, 2});
  EXPECT_TRUE(a.SharesStorageWith(flat));
  EXPECT_EQ(a.storage_offset(), 2);
  EXPECT_EQ(a.ToVector(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(a.data<float>(), flat.data<float>() + 2);

  // Writes through a view are seen by the base and the other way round.
  Tensor v = a;  // copies the handle only
  ops::Fill(v, 9.0f);
  EXPECT_EQ(flat.ToVector(), (std::vector<float>{0, 1, 9, 9, 9, 9, 6, 7}));
  flat.data<float>()[3] = -1.0f;
  EXPECT_EQ(a.ToVector()[1], -1.0f);

  // Views of views add offsets.
  Tensor b = a.View(1, {2});
  EXPECT_EQ(b.storage_offset(), 3);
  EXPECT_TRUE(b.SharesStorageWith(flat));
  EXPECT_FALSE(b.IsSameView(a));
  EXPECT_TRUE(b.IsSameView(flat.View(3, {2})));

  Tensor r = flat.Reshape({2, 4});
  EXPECT_TRUE(r.SharesStorageWith(flat));
  EXPECT_EQ(r.shape(), (Shape{2, 4}));
  EXPECT_EQ(r.Flatten().shape(), (Shape{8}));
  EXPECT_TRUE(r.Flatten().IsSameView(flat));

  // The storage outlives the base handle while a view holds it.
  Tensor survivor;
  {
    Tensor tmp = Tensor::FromVector({1, 2, 3}, {3});
    survivor = tmp.View(1, {2});
    EXPECT_EQ(tmp.storage().use_count(), 2);
  }
  EXPECT_EQ(survivor.storage().use_count(), 1);
  EXPECT_EQ(survivor.ToVector(), (std::vector<float>{2, 3}));
}

TEST(Tensor, ToCloneToVector) {
  Tensor t = Tensor::FromVector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor same = t.To(Device::CPU());
  EXPECT_TRUE(same.IsSameView(t));  // already there: the same tensor

  Tensor c = t.Clone();
  EXPECT_FALSE(c.SharesStorageWith(t));
  EXPECT_EQ(c.shape(), t.shape());
  EXPECT_EQ(c.ToVector(), t.ToVector());
  c.data<float>()[0] = 100.0f;
  EXPECT_EQ(t.ToVector()[0], 1.0f);

  // Cloning a view copies only the view.
  Tensor v = t.View(3, {3}).Clone();
  EXPECT_EQ(v.storage()->nbytes(), 3 * sizeof(float));
  EXPECT_EQ(v.ToVector(), (std::vector<float>{4, 5, 6}));
}

TEST(Tensor, Errors) {
  Tensor t = Tensor::Zeros({2, 3});
  ExpectTensorError([&] { t.View(4, {3}); }, {"View", "[3]", "[2, 3]"});
  ExpectTensorError([&] { t.View(-1, {1}); }, {"View"});
  ExpectTensorError([&] { t.Reshape({4, 2}); }, {"Reshape", "[2, 3]", "[4, 2]"});
  ExpectTensorError([&] { t.Item(); }, {"Item", "[2, 3]"});
  ExpectTensorError([&] { t.size(2); }, {"size", "[2, 3]"});
  ExpectTensorError([&] { Tensor::FromVector({1, 2, 3}, {2, 2}); }, {"FromVector", "[2, 2]"});
  ExpectTensorError([&] { Tensor::Zeros({-1, 2}); }, {"negative"});
  Tensor undefined;
  ExpectTensorError([&] { undefined.Clone(); }, {"undefined"});
  ExpectTensorError([&] { undefined.ToVector(); }, {"undefined"});
  ExpectTensorError([&] { undefined.View(0, {}); }, {"undefined"});
}

}  // namespace
}  // namespace psync
