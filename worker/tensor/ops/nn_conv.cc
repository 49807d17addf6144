// The CNN layers of the nn family (declared in ops/nn.h): argument checks,
// and Conv2d as im2col + matrix products, written once for every device
// from the nn kernels (Im2Col, Col2Im, ...) and BlasKernels' Gemm.
//
// Images are processed in chunks: the CPU takes one image at a time (its
// column matrix, K x L, stays in cache, as in torch's slow_conv2d); CUDA
// takes as many as fit in kCudaChunkBytes of scratch, each chunk one
// strided-batched cuBLAS call. Every sum over images is taken in image
// order (dweight: the per-image products added in double by
// AccumulateParts), so the chunking never changes a result bit.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/tensor/ops/blas_kernels.h"
#include "worker/tensor/ops/check.h"
#include "psync/tensor/ops/copy.h"
#include "psync/tensor/ops/nn.h"
#include "worker/tensor/ops/nn_kernels.h"

namespace psync::ops {
namespace {

// Scratch (column matrices, per-image products) per CUDA chunk.
constexpr int64_t kCudaChunkBytes = int64_t{64} << 20;

// x [N, Cin, H, W] and weight [Cout, Cin, kh, kw] of one dtype on one device
// (float32, or float64 on the CPU), bias [Cout] when given, stride >= 1,
// padding >= 0, a kernel that fits the padded image.
Conv2dGeometry CheckConv2d(const char* op, check::Args args, const Tensor& x, const Tensor& weight,
                           const Tensor* bias, int64_t stride, int64_t padding) {
  check::Defined(op, args);
  check::ComputeFloat(op, args);
  check::Dim(op, args, {"x", &x}, 4);
  check::Dim(op, args, {"weight", &weight}, 4);
  Conv2dGeometry g;
  g.n = x.size(0);
  g.cin = x.size(1);
  g.h = x.size(2);
  g.w = x.size(3);
  g.cout = weight.size(0);
  g.kh = weight.size(2);
  g.kw = weight.size(3);
  g.stride = stride;
  g.padding = padding;
  if (weight.size(1) != g.cin) {
    check::Fail(op, args, absl::StrCat("weight [Cout, Cin, kh, kw] has Cin = ", weight.size(1), " but x has ", g.cin,
                                       " channels (x is [N, Cin, H, W])"));
  }
  if (g.cin == 0 || g.h == 0 || g.w == 0 || g.cout == 0 || g.kh == 0 || g.kw == 0) {
    check::Fail(op, args, "every dimension of x but the batch, and of weight, must be positive");
  }
  if (bias != nullptr && bias->shape() != Shape{g.cout}) {
    check::Fail(op, args, absl::StrCat("bias must be [", g.cout, "] (one per output channel)"));
  }
  if (stride < 1) check::Fail(op, args, absl::StrCat("stride must be >= 1, got ", stride));
  if (padding < 0) check::Fail(op, args, absl::StrCat("padding must be >= 0, got ", padding));
  if (g.h + 2 * padding < g.kh || g.w + 2 * padding < g.kw) {
    check::Fail(op, args, absl::StrCat("the ", g.kh, "x", g.kw, " kernel is larger than the padded ", g.h + 2 * padding,
                                       "x", g.w + 2 * padding, " image (padding ", padding, ")"));
  }
  g.ho = (g.h + 2 * padding - g.kh) / stride + 1;
  g.wo = (g.w + 2 * padding - g.kw) / stride + 1;
  return g;
}

// A 1x1 kernel at stride 1 without padding: the column matrix of an image
// is the image itself ([Cin, H*W]), so im2col and col2im are skipped.
bool ColumnsAreTheImage(const Conv2dGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.stride == 1 && g.padding == 0;
}

// Images per chunk, given the scratch elements one image needs.
int64_t ImagesPerChunk(Device d, DType dt, int64_t scratch_per_image, int64_t n) {
  if (d.is_cpu() || scratch_per_image == 0) return d.is_cpu() ? 1 : std::max<int64_t>(n, 1);
  const int64_t fit = kCudaChunkBytes / (scratch_per_image * static_cast<int64_t>(ElementSize(dt)));
  return std::clamp<int64_t>(fit, 1, std::max<int64_t>(n, 1));
}

// One row-major matrix operand per image: image b's matrix starts
// b * batch_stride elements after t's first (batch_stride 0: the same matrix
// for every image).
struct Operand {
  const Tensor& t;
  bool trans;
  int64_t ld, batch_stride;
};

// c[b] = op(a[b]) @ op(b[b]) ([m, k] @ [k, n]) for b < batch; c contiguous
// [batch, m, n].
void ProductPerImage(Device d, DType dt, int64_t batch, int64_t m, int64_t n, int64_t k, const Operand& a,
                     const Operand& b, const Tensor& c) {
  GemmArgs g;
  g.dtype = dt;
  g.device = d.index;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a.data = a.t.raw_data();
  g.a.trans = a.trans;
  g.a.ld = a.ld;
  g.b.data = b.t.raw_data();
  g.b.trans = b.trans;
  g.b.ld = b.ld;
  if (batch > 1) {  // a batch of one is a plain product
    g.batch_shape = {batch};
    g.a.batch_strides = {a.batch_stride};
    g.b.batch_strides = {b.batch_stride};
  }
  g.c = c;
  BlasKernelsFor(d).Gemm(g);
}

Tensor Conv2dImpl(const char* op, check::Args args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  int64_t stride, int64_t padding) {
  const Conv2dGeometry g = CheckConv2d(op, args, x, weight, bias.defined() ? &bias : nullptr, stride, padding);
  const Device d = x.device();
  const DType dt = x.dtype();
  Tensor y = Tensor::Empty({g.n, g.cout, g.ho, g.wo}, dt, d);
  if (g.n == 0) return y;
  const NnKernels& kern = NnKernelsFor(d);
  const Tensor xc = x.Contiguous(), wc = weight.Contiguous(), bc = bias.defined() ? bias.Contiguous() : Tensor();
  const int64_t K = g.K(), L = g.L();
  const bool direct = ColumnsAreTheImage(g);
  const int64_t chunk = ImagesPerChunk(d, dt, direct ? 0 : K * L, g.n);
  const Tensor col = direct ? Tensor() : Tensor::Empty({chunk, K, L}, dt, d);
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.n - n0);
    const Tensor xs = xc.Narrow(0, n0, nb);
    const Tensor cols = direct ? xs : col.Narrow(0, 0, nb);
    if (!direct) kern.Im2Col(xs, g, cols);
    // y[n] [Cout, L] = weight [Cout, K] @ cols[n] [K, L]
    const Tensor ys = y.Narrow(0, n0, nb);
    ProductPerImage(d, dt, nb, g.cout, L, K, {wc, false, K, 0}, {cols, false, L, K * L}, ys);
    // Per chunk, while the CPU's one image is still in cache.
    if (bias.defined()) kern.AddChannelBias(ys.Reshape({nb, g.cout, L}), bc);
  }
  return y;
}

}  // namespace

Tensor Conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding) {
  if (bias.defined()) {
    return Conv2dImpl("Conv2d", {{"x", &x}, {"weight", &weight}, {"bias", &bias}}, x, weight, bias, stride, padding);
  }
  return Conv2dImpl("Conv2d", {{"x", &x}, {"weight", &weight}}, x, weight, bias, stride, padding);
}

Conv2dGrads Conv2dBackward(const Tensor& grad, const Tensor& x, const Tensor& weight, int64_t stride, int64_t padding,
                           std::array<bool, 3> needed, Tensor dweight_out, Tensor dbias_out) {
  const char* op = "Conv2dBackward";
  check::Args args = {{"grad", &grad}, {"x", &x}, {"weight", &weight}};
  const Conv2dGeometry g = CheckConv2d(op, args, x, weight, nullptr, stride, padding);
  if (grad.shape() != Shape{g.n, g.cout, g.ho, g.wo}) {
    check::Fail(op, args, absl::StrCat("grad must be the forward's output shape ",
                                       ShapeToString({g.n, g.cout, g.ho, g.wo})));
  }
  const Device d = x.device();
  const DType dt = x.dtype();
  const NnKernels& kern = NnKernelsFor(d);
  const int64_t K = g.K(), L = g.L();
  const Tensor gc = grad.Contiguous();
  Conv2dGrads r;
  if (needed[2]) {
    r.dbias = check::Destination(op, args, "dbias", std::move(dbias_out), {g.cout}, dt, d);
    if (g.n == 0) {
      Fill(r.dbias, 0.0);
    } else {
      kern.ChannelSums(gc.Reshape({g.n, g.cout, L}), r.dbias);
    }
  }
  const bool want_dx = needed[0], want_dw = needed[1];
  if (want_dx) r.dx = Tensor::Empty(x.shape(), dt, d);
  if (want_dw) r.dweight = check::Destination(op, args, "dweight", std::move(dweight_out), weight.shape(), dt, d);
  if (g.n == 0 || !(want_dx || want_dw)) {
    if (want_dw) Fill(r.dweight, 0.0);
    return r;
  }

  const Tensor xc = want_dw ? x.Contiguous() : Tensor(), wc = weight.Contiguous();
  const bool direct = ColumnsAreTheImage(g);
  const int64_t scratch = (want_dw ? g.cout * K + (direct ? 0 : K * L) : 0) + (want_dx && !direct ? K * L : 0);
  const int64_t chunk = ImagesPerChunk(d, dt, scratch, g.n);
  const Tensor col = want_dw && !direct ? Tensor::Empty({chunk, K, L}, dt, d) : Tensor();
  const Tensor parts = want_dw ? Tensor::Empty({chunk, g.cout * K}, dt, d) : Tensor();
  const Tensor dcol = want_dx && !direct ? Tensor::Empty({chunk, K, L}, dt, d) : Tensor();
  const Tensor acc = want_dw ? Tensor::Zeros({g.cout * K}, kFloat64, d) : Tensor();
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.n - n0);
    const Tensor gs = gc.Narrow(0, n0, nb);
    if (want_dw) {
      const Tensor xs = xc.Narrow(0, n0, nb);
      const Tensor cols = direct ? xs : col.Narrow(0, 0, nb);
      if (!direct) kern.Im2Col(xs, g, cols);
      // parts[n] [Cout, K] = grad[n] [Cout, L] @ cols[n]^T [L, K]
      const Tensor ps = parts.Narrow(0, 0, nb);
      ProductPerImage(d, dt, nb, g.cout, K, L, {gs, false, L, g.cout * L}, {cols, true, L, K * L}, ps);
      kern.AccumulateParts(ps, acc);
    }
    if (want_dx) {
      const Tensor dxs = r.dx.Narrow(0, n0, nb);
      const Tensor dcols = direct ? dxs : dcol.Narrow(0, 0, nb);
      // dcols[n] [K, L] = weight^T [K, Cout] @ grad[n] [Cout, L]
      ProductPerImage(d, dt, nb, K, L, g.cout, {wc, true, K, 0}, {gs, false, L, g.cout * L}, dcols);
      if (!direct) kern.Col2Im(dcols, g, dxs);
    }
  }
  if (want_dw) Copy(r.dweight, acc);  // double -> the weight's dtype, rounded once
  return r;
}

// ---------------------------------------------------------------- max pooling

MaxPool2dResult MaxPool2d(const Tensor& x, int64_t kernel) {
  const char* op = "MaxPool2d";
  check::Args args = {{"x", &x}};
  const Device d = check::Defined(op, args);
  const DType dt = check::ComputeFloat(op, args);
  check::Dim(op, args, {"x", &x}, 4);
  if (kernel < 1) check::Fail(op, args, absl::StrCat("kernel must be >= 1, got ", kernel));
  if (x.size(2) < kernel || x.size(3) < kernel) {
    check::Fail(op, args, absl::StrCat("the ", kernel, "x", kernel, " window is larger than the ", x.size(2), "x",
                                       x.size(3), " image"));
  }
  const Shape out = {x.size(0), x.size(1), x.size(2) / kernel, x.size(3) / kernel};
  MaxPool2dResult r{Tensor::Empty(out, dt, d), Tensor::Empty(out, kInt64, d)};
  if (r.y.numel() == 0) return r;
  const int64_t planes = x.size(0) * x.size(1);
  NnKernelsFor(d).MaxPool2d(x.Contiguous().Reshape({planes, x.size(2), x.size(3)}), kernel,
                            r.y.Reshape({planes, out[2], out[3]}), r.indices.Reshape({planes, out[2], out[3]}));
  return r;
}

Tensor MaxPool2dBackward(const Tensor& grad, const Tensor& indices, int64_t kernel, const Shape& input_shape) {
  const char* op = "MaxPool2dBackward";
  check::Args args = {{"grad", &grad}, {"indices", &indices}};
  const Device d = check::Defined(op, args);
  const DType dt = check::FloatOperand(op, args, {"grad", &grad});
  check::DTypeIs(op, args, {"indices", &indices}, kInt64);
  if (kernel < 1) check::Fail(op, args, absl::StrCat("kernel must be >= 1, got ", kernel));
  if (input_shape.size() != 4 || input_shape[2] < kernel || input_shape[3] < kernel) {
    check::Fail(op, args, absl::StrCat("input_shape ", ShapeToString(input_shape), " must be [N, C, H, W] with H, W >= ",
                                       kernel));
  }
  const Shape out = {input_shape[0], input_shape[1], input_shape[2] / kernel, input_shape[3] / kernel};
  if (grad.shape() != out || indices.shape() != out) {
    check::Fail(op, args, absl::StrCat("grad and indices must be ", ShapeToString(out), " (the forward's output for input ",
                                       ShapeToString(input_shape), " and a ", kernel, "x", kernel, " window)"));
  }
  Tensor dx = Tensor::Empty(input_shape, dt, d);
  if (dx.numel() == 0) return dx;
  const int64_t planes = input_shape[0] * input_shape[1];
  NnKernelsFor(d).MaxPool2dBackward(grad.Contiguous().Reshape({planes, out[2], out[3]}),
                                    indices.Contiguous().Reshape({planes, out[2], out[3]}), kernel,
                                    dx.Reshape({planes, input_shape[2], input_shape[3]}));
  return dx;
}

}  // namespace psync::ops
