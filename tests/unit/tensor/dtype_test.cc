// Dtypes: names, the 16-bit conversions (round to nearest even, NaN, inf,
// subnormals), typed access and conversions between tensor dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/unit/tensor/test_util.h"
#include "psync/tensor/dtype.h"
#include "psync/tensor/ops.h"

namespace psync {
namespace {

using ::psync::testing::ExpectTensorError;

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

TEST(DType, NamesSizesAndParsing) {
  for (DType d : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64}) {
    absl::StatusOr<DType> back = ParseDType(DTypeName(d));
    ASSERT_TRUE(back.ok()) << DTypeName(d);
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(ElementSize(kFloat32), 4u);
  EXPECT_EQ(ElementSize(kBFloat16), 2u);
  EXPECT_EQ(ElementSize(kInt64), 8u);
  EXPECT_EQ(*ParseDType("bf16"), kBFloat16);
  EXPECT_EQ(*ParseDType("FP16"), kFloat16);
  absl::StatusOr<DType> bad = ParseDType("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("int8"), std::string::npos);
  EXPECT_FALSE(IsFloating(kInt64));
  EXPECT_TRUE(IsFloating(kBFloat16));
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(static_cast<float>(BFloat16(-2.5f)), -2.5f);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(BFloat16(Bits(0x3f808000)).bits, 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6: rounds up to even.
  EXPECT_EQ(BFloat16(Bits(0x3f818000)).bits, 0x3f82);
  EXPECT_EQ(BFloat16(Bits(0x3f808001)).bits, 0x3f81);  // just above halfway
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(static_cast<float>(BFloat16(std::numeric_limits<float>::infinity()))));
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds up to inf, as PyTorch does
}

TEST(DType, Float16RoundsToNearestEvenWithSubnormals) {
  EXPECT_EQ(Float16(1.0f).bits, 0x3c00);
  EXPECT_EQ(Float16(-2.0f).bits, 0xc000);
  EXPECT_EQ(Float16(65504.0f).bits, 0x7bff);  // largest finite half
  EXPECT_EQ(Float16(65520.0f).bits, 0x7c00);  // halfway to the next: ties to even = inf
  EXPECT_EQ(Float16(65519.0f).bits, 0x7bff);
  EXPECT_EQ(Float16(std::ldexp(1.0f, -24)).bits, 0x0001);   // smallest subnormal
  EXPECT_EQ(Float16(std::ldexp(1.0f, -25)).bits, 0x0000);   // halfway to it: even (0)
  EXPECT_EQ(Float16(std::ldexp(1.5f, -25)).bits, 0x0001);
  EXPECT_EQ(Float16(std::ldexp(1.0f, -14)).bits, 0x0400);   // smallest normal
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even.
  EXPECT_EQ(Float16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  EXPECT_EQ(Float16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  EXPECT_TRUE(std::isnan(static_cast<float>(Float16(std::nanf("")))));
  // Every half value converts to float and back unchanged.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    Float16 x;
    x.bits = static_cast<uint16_t>(h);
    const float f = static_cast<float>(x);
    if (std::isnan(f)) continue;
    ASSERT_EQ(Float16(f).bits, h) << std::hex << h;
  }
}

TEST(DType, TypedAccessChecksTheDType) {
  Tensor i = Tensor::FromVector(std::vector<int64_t>{3, -1, 7}, {3});
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.nbytes(), 24u);
  EXPECT_EQ(i.data<int64_t>()[2], 7);
  EXPECT_EQ(i.ToVector<int64_t>(), (std::vector<int64_t>{3, -1, 7}));
  ExpectTensorError([&] { i.data<float>(); }, {"Tensor::data", "int64", "float32"});
  ExpectTensorError([&] { i.ToVector(); }, {"ToVector", "int64"});
  EXPECT_EQ(Tensor::Zeros({2}, kFloat64).DebugString(), "Tensor[2] float64 cpu");
  EXPECT_EQ(Tensor::Full({1}, 2.0, kInt64).Item<int64_t>(), 2);
}

TEST(DType, ConversionsBetweenDTypes) {
  Tensor f = Tensor::FromVector({1.5f, -2.25f, 1.0f + std::ldexp(1.0f, -9), 3.0e38f}, {4});
  Tensor b = f.To(kBFloat16);
  EXPECT_EQ(b.dtype(), kBFloat16);
  const std::vector<BFloat16> vb = b.ToVector<BFloat16>();
  for (size_t i = 0; i < vb.size(); ++i) EXPECT_EQ(vb[i].bits, BFloat16(f.ToVector()[i]).bits) << i;
  const std::vector<float> back = b.To(kFloat32).ToVector();
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[2], 1.0f);  // 1 + 2^-9 rounds to 1 in bfloat16
  Tensor h = f.To(kFloat16);
  EXPECT_TRUE(std::isinf(h.To(kFloat32).ToVector()[3]));  // 3e38 overflows half
  EXPECT_EQ(Tensor::FromVector({2.9f, -2.9f}, {2}).To(kInt64).ToVector<int64_t>(), (std::vector<int64_t>{2, -2}));
  EXPECT_EQ(Tensor::FromVector(std::vector<int64_t>{5, -3}, {2}).To(kFloat64).ToVector<double>(),
            (std::vector<double>{5.0, -3.0}));
  // Same dtype: no copy.
  EXPECT_TRUE(f.To(kFloat32).IsSameView(f));
}

TEST(DType, FloatOpsComputeInFloat64OnCpuAndRefuseStorageTypes) {
  Tensor a = Tensor::FromVector(std::vector<double>{1.0, 2.0}, {2});
  Tensor y = ops::Add(a, a);
  EXPECT_EQ(y.dtype(), kFloat64);
  EXPECT_EQ(y.ToVector<double>(), (std::vector<double>{2.0, 4.0}));
  EXPECT_EQ(ops::Sum(a).Item<double>(), 3.0);
  ExpectTensorError([&] { ops::Add(a, a.To(kFloat32)); }, {"Add", "float64", "float32", "dtypes differ"});
  Tensor h = a.To(kFloat16);
  ExpectTensorError([&] { ops::Relu(h); }, {"Relu", "float16", "storage type"});
}

// bfloat16 is computed (in float32, one rounding per result) by the ops
// that say so; reductions of it come out in float32.
TEST(DType, Bfloat16ComputesInFloat32AndReducesToFloat32) {
  Tensor a = Tensor::FromVector(std::vector<float>{1.0f, -2.5f, 3.0f}, {3}).To(kBFloat16);
  Tensor r = ops::Relu(ops::Add(a, a));
  EXPECT_EQ(r.dtype(), kBFloat16);
  EXPECT_EQ(r.To(kFloat32).ToVector(), (std::vector<float>{2.0f, 0.0f, 6.0f}));
  Tensor s = ops::Sum(a);
  EXPECT_EQ(s.dtype(), kFloat32);
  EXPECT_EQ(s.Item(), 1.5f);
  // 1 + 2^-8 is not a bfloat16: the sum rounds once, to even (1.0).
  Tensor one = Tensor::Full({1}, 1.0, kBFloat16), tiny = Tensor::Full({1}, 1.0 / 256, kBFloat16);
  EXPECT_EQ(ops::Add(one, tiny).To(kFloat32).Item(), 1.0f);
  ExpectTensorError([&] { ops::Add(a, a.To(kFloat32)); }, {"Add", "bfloat16", "float32", "dtypes differ"});
}

}  // namespace
}  // namespace psync
