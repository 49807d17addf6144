// Strided views (Permute, Transpose, Narrow), Contiguous, Reshape and
// Copy through strides, and matrix products on strided operands.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tests/unit/tensor/test_util.h"
#include "psync/tensor/ops.h"

namespace psync {
namespace {

using ::psync::testing::ExpectTensorError;
using ::psync::testing::RandomTensor;

Tensor Iota(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(NumelOf(shape)));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::FromVector(v, shape);
}

TEST(Strided, PermuteIsAViewWithPermutedStrides) {
  Tensor x = Iota({2, 3, 4});
  Tensor p = x.Permute({2, 0, 1});
  EXPECT_TRUE(p.SharesStorageWith(x));
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  // p[k][i][j] == x[i][j][k]
  const std::vector<float> c = p.Contiguous().ToVector();
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(c[(k * 2 + i) * 3 + j], static_cast<float>(i * 12 + j * 4 + k));
  EXPECT_EQ(p.ToVector(), c);  // host copies go through Contiguous
  EXPECT_TRUE(p.Permute({1, 2, 0}).is_contiguous());
  ExpectTensorError([&] { x.Permute({0, 0, 1}); }, {"Permute", "repeated"});
  ExpectTensorError([&] { x.Permute({0, 1}); }, {"Permute", "[2, 3, 4]"});
}

TEST(Strided, NarrowTransposeAndReshape) {
  Tensor x = Iota({3, 6});
  Tensor n = x.Narrow(1, 2, 3);  // columns 2..4
  EXPECT_EQ(n.shape(), (Shape{3, 3}));
  EXPECT_EQ(n.storage_offset(), 2);
  EXPECT_EQ(n.ToVector(), (std::vector<float>{2, 3, 4, 8, 9, 10, 14, 15, 16}));
  EXPECT_EQ(x.Narrow(0, 1, 1).ToVector(), (std::vector<float>{6, 7, 8, 9, 10, 11}));
  EXPECT_TRUE(x.Narrow(0, 1, 2).is_contiguous());
  ExpectTensorError([&] { x.Narrow(1, 4, 3); }, {"Narrow", "[4, 7)", "[3, 6]"});

  Tensor t = x.Transpose(0, 1);
  EXPECT_EQ(t.shape(), (Shape{6, 3}));
  EXPECT_EQ(t.ToVector()[1], 6.0f);
  // Reshape of a strided view copies (row-major order of the view).
  Tensor r = t.Reshape({-1});
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_FALSE(r.SharesStorageWith(x));
  EXPECT_EQ(r.ToVector(), t.ToVector());
  // Of a contiguous tensor it is a view, with -1 inferred.
  Tensor v = x.Reshape({2, -1, 3});
  EXPECT_EQ(v.shape(), (Shape{2, 3, 3}));
  EXPECT_TRUE(v.SharesStorageWith(x));
  ExpectTensorError([&] { x.Reshape({4, -1}); }, {"Reshape", "-1"});
  // A column slice whose last dim is split stays a view (torch.view's rule):
  // q of a [B, T, 3C] projection reshaped to heads.
  Tensor cols = x.Narrow(1, 2, 4).Reshape({3, 2, 2});
  EXPECT_TRUE(cols.SharesStorageWith(x));
  EXPECT_EQ(cols.strides(), (Strides{6, 2, 1}));
  EXPECT_EQ(cols.ToVector(), (std::vector<float>{2, 3, 4, 5, 8, 9, 10, 11, 14, 15, 16, 17}));
  // Merging the rows of a column slice cannot be a view: a copy.
  Tensor merged = x.Narrow(1, 2, 4).Reshape({12});
  EXPECT_FALSE(merged.SharesStorageWith(x));
  EXPECT_EQ(merged.ToVector(), cols.ToVector());
  ExpectTensorError([&] { n.View(0, {9}); }, {"View", "not contiguous"});
}

TEST(Strided, CopyIntoAStridedDestinationWithConversion) {
  Tensor dst = Tensor::Zeros({2, 5}, kFloat64);
  Tensor slice = dst.Narrow(1, 1, 3);
  ops::Copy(slice, Iota({3, 2}).Transpose(0, 1));  // [[0,2,4],[1,3,5]] as float32 -> float64
  EXPECT_EQ(dst.ToVector<double>(), (std::vector<double>{0, 0, 2, 4, 0, 0, 1, 3, 5, 0}));
  ExpectTensorError([&] { ops::Copy(slice, Iota({6})); }, {"Copy", "shapes differ"});
}

std::vector<double> NaiveBatchedMatmul(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.ToVector(), vb = b.ToVector();
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1), batch = a.numel() / (m * k);
  std::vector<double> out(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t p = 0; p < k; ++p)
          out[(q * m + i) * n + j] += static_cast<double>(va[(q * m + i) * k + p]) * vb[(q * k + p) * n + j];
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << i;
}

TEST(Strided, BatchedMatmulOnStridedOperandsMatchesContiguous) {
  // The attention layout: q and k are slices of one [B, T, 3C] tensor,
  // viewed as [B, H, T, hs]: neither contiguous nor with collapsible batch dims.
  const int64_t B = 2, T = 5, H = 3, hs = 4, C = H * hs;
  Tensor qkv = RandomTensor({B, T, 3 * C}, 7);
  auto heads = [&](int64_t part) { return qkv.Narrow(2, part * C, C).Reshape({B, T, H, hs}).Permute({0, 2, 1, 3}); };
  Tensor q = heads(0), k = heads(1);
  EXPECT_FALSE(q.is_contiguous());
  EXPECT_TRUE(q.SharesStorageWith(qkv));  // the head split is a view, and the product reads it in place
  Tensor att = ops::BatchedMatmul(q, k.Transpose(-2, -1));
  EXPECT_EQ(att.shape(), (Shape{B, H, T, T}));
  ExpectNear(att.ToVector(), NaiveBatchedMatmul(q.Contiguous(), k.Transpose(-2, -1).Contiguous()), 1e-5);
  // The flags and the views are interchangeable; every entry equals a 2-D Matmul exactly.
  Tensor att2 = ops::BatchedMatmul(q.Contiguous(), k.Contiguous(), false, true);
  EXPECT_EQ(att.ToVector(), att2.ToVector());
  Tensor q11 = q.Contiguous().Reshape({B * H, T, hs}).Narrow(0, 4, 1).Reshape({T, hs});
  Tensor k11 = k.Contiguous().Reshape({B * H, T, hs}).Narrow(0, 4, 1).Reshape({T, hs});
  EXPECT_EQ(ops::Matmul(q11, k11, false, true).ToVector(),
            att.Reshape({B * H, T, T}).Narrow(0, 4, 1).Reshape({T, T}).ToVector());
  // Transposed inputs through the flags match transposed views.
  Tensor a = RandomTensor({4, 3}, 8), b = RandomTensor({5, 4}, 9);
  EXPECT_EQ(ops::Matmul(a, b, true, true).ToVector(), ops::Matmul(a.Transpose(0, 1), b.Transpose(0, 1)).ToVector());
}

TEST(Strided, BatchedMatmulShapesAndFloat64) {
  Tensor a = RandomTensor({3, 2, 4}, 1).To(kFloat64), b = RandomTensor({3, 4, 5}, 2).To(kFloat64);
  Tensor c = ops::BatchedMatmul(a, b);
  EXPECT_EQ(c.dtype(), kFloat64);
  EXPECT_EQ(c.shape(), (Shape{3, 2, 5}));
  ExpectTensorError([&] { ops::BatchedMatmul(a, RandomTensor({2, 4, 5}, 3).To(kFloat64)); },
                    {"BatchedMatmul", "batch dimensions differ"});
  ExpectTensorError([&] { ops::BatchedMatmul(a, b.To(kFloat32)); }, {"BatchedMatmul", "dtypes differ"});
  // Empty inner dimension: zeros.
  Tensor z = ops::BatchedMatmul(Tensor::Zeros({2, 3, 0}), Tensor::Zeros({2, 0, 4}));
  EXPECT_EQ(z.ToVector(), std::vector<float>(24, 0.0f));
}

}  // namespace
}  // namespace psync
