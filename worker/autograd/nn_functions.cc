#include "psync/autograd/nn_functions.h"

#include <array>
#include <utility>
#include <vector>

#include "psync/autograd/function_node.h"
#include "psync/tensor/ops.h"

namespace psync::autograd {
namespace {

// ---------------------------------------------------------------- nodes

class EmbeddingBackward : public SingleOutputNode {
 public:
  EmbeddingBackward(Tensor ids, Shape weight_shape)
      : SingleOutputNode("EmbeddingBackward", true), ids_(std::move(ids)), weight_shape_(std::move(weight_shape)) {}

 private:
  TensorList Backward(const Tensor& g) override {
    // Computed from scratch, so straight into the leaf's bucket slot when it
    // has one (a tied weight's second producer gets a fresh tensor).
    return {ops::EmbeddingBackwardInto(OutputBuffer(0, weight_shape_, g.device()), g, ids_, weight_shape_[0])};
  }
  void ReleaseSaved() override { ids_ = Tensor(); }
  Tensor ids_;
  const Shape weight_shape_;
};

class LayerNormBackward : public SingleOutputNode {
 public:
  LayerNormBackward() : SingleOutputNode("LayerNormBackward", true) {}
  Tensor x, weight, mean, rstd;

 private:
  TensorList Backward(const Tensor& g) override {
    const Shape c = {x.size(-1)};
    // The kernel computes all three in one pass; unneeded ones are dropped.
    ops::LayerNormGrads r =
        ops::LayerNormBackward(g, x, weight, mean, rstd, OutputBuffer(1, c, g.device()), OutputBuffer(2, c, g.device()));
    return {needs_grad(0) ? r.dx : Tensor(), needs_grad(1) ? r.dweight : Tensor(),
            needs_grad(2) ? r.dbias : Tensor()};
  }
  void ReleaseSaved() override { x = weight = mean = rstd = Tensor(); }
};

// ResidualLayerNorm: outputs h = x + a and y = LayerNorm(h). h's gradient
// (from the next residual) is added to the LayerNorm's dx inside the
// backward kernel; a gets that sum in a's dtype.
class ResidualLayerNormBackward : public FunctionNode {
 public:
  ResidualLayerNormBackward(DType a_dtype) : FunctionNode("ResidualLayerNormBackward", true), a_dtype_(a_dtype) {}
  Tensor h, weight, mean, rstd;

 private:
  TensorList BackwardAll(const TensorList& grads) override {
    const Tensor& g_h = grads[0];
    const Tensor& g_y = grads[1];
    Tensor dh, dweight, dbias;
    if (g_y.defined()) {
      const Shape c = {h.size(-1)};
      ops::LayerNormGrads r = ops::LayerNormBackward(g_y, h, weight, mean, rstd, OutputBuffer(2, c, g_y.device()),
                                                     OutputBuffer(3, c, g_y.device()), g_h);
      dh = std::move(r.dx);
      dweight = std::move(r.dweight);
      dbias = std::move(r.dbias);
    } else {
      dh = g_h;  // y got no gradient: only the residual's flows
    }
    Tensor da = needs_grad(1) ? dh.To(a_dtype_) : Tensor();
    return {needs_grad(0) ? dh : Tensor(), std::move(da), needs_grad(2) ? dweight : Tensor(),
            needs_grad(3) ? dbias : Tensor()};
  }
  void ReleaseSaved() override { h = weight = mean = rstd = Tensor(); }
  const DType a_dtype_;
};

// Mlp: y = proj(gelu(fc(x))) in one node. Backward: dW_proj = g^T h,
// dpre = (g @ W_proj) * gelu'(pre) (one product with the GELU-backward
// epilogue), dW_fc = dpre^T x, dx = dpre @ W_fc; bias gradients are column
// sums. Weight gradients in the weights' own dtype, into their slots.
class MlpBackward : public SingleOutputNode {
 public:
  MlpBackward(Shape x_shape, DType weight_dtype)
      : SingleOutputNode("MlpBackward", true), x_shape_(std::move(x_shape)), weight_dtype_(weight_dtype) {}
  Tensor x, pre, h, fc_value, proj_value;  // x, pre, h [N, *]

 private:
  TensorList Backward(const Tensor& grad) override {
    const Tensor g = grad.Reshape({-1, grad.size(-1)});  // [N, C]
    const Device d = g.device();
    TensorList r(5);
    if (needs_grad(3)) {
      r[3] = ops::MatmulInto(WeightGradBuffer(3, proj_value.shape(), weight_dtype_, d), g, h, true, false);
    }
    if (needs_grad(4)) r[4] = ops::SumRowsInto(OutputBuffer(4, {g.size(1)}, d), g);
    if (needs_grad(0) || needs_grad(1) || needs_grad(2)) {
      const Tensor dpre = ops::MatmulGeluBackward(g, proj_value, pre);  // [N, 4C]
      if (needs_grad(1)) {
        r[1] = ops::MatmulInto(WeightGradBuffer(1, fc_value.shape(), weight_dtype_, d), dpre, x, true, false);
      }
      if (needs_grad(2)) r[2] = ops::SumRowsInto(OutputBuffer(2, {dpre.size(1)}, d), dpre);
      if (needs_grad(0)) r[0] = ops::Matmul(dpre, fc_value).Reshape(x_shape_);
    }
    return r;
  }
  void ReleaseSaved() override { x = pre = h = fc_value = proj_value = Tensor(); }
  const Shape x_shape_;
  const DType weight_dtype_;
};

class GeluBackward : public SingleOutputNode {
 public:
  explicit GeluBackward(Tensor x) : SingleOutputNode("GeluBackward", true), x_(std::move(x)) {}

 private:
  TensorList Backward(const Tensor& g) override { return {ops::GeluBackward(g, x_)}; }
  void ReleaseSaved() override { x_ = Tensor(); }
  Tensor x_;
};

class CausalSoftmaxBackward : public SingleOutputNode {
 public:
  CausalSoftmaxBackward(Tensor probs, double scale)
      : SingleOutputNode("CausalSoftmaxBackward", true), probs_(std::move(probs)), scale_(scale) {}

 private:
  TensorList Backward(const Tensor& g) override { return {ops::CausalSoftmaxBackward(g, probs_, scale_)}; }
  void ReleaseSaved() override { probs_ = Tensor(); }
  Tensor probs_;  // the forward's result
  const double scale_;
};

class CausalAttentionBackward : public SingleOutputNode {
 public:
  CausalAttentionBackward(double scale, bool deterministic)
      : SingleOutputNode("CausalAttentionBackward", true), scale_(scale), deterministic_(deterministic) {}
  Tensor q, k, v, out, lse;

 private:
  TensorList Backward(const Tensor& g) override {
    // One kernel computes all three; unneeded ones are dropped.
    ops::AttentionGrads r = ops::CausalAttentionBackward(g, q, k, v, out, lse, scale_, deterministic_);
    return {needs_grad(0) ? r.dq : Tensor(), needs_grad(1) ? r.dk : Tensor(), needs_grad(2) ? r.dv : Tensor()};
  }
  void ReleaseSaved() override { q = k = v = out = lse = Tensor(); }
  const double scale_;
  const bool deterministic_;
};

class Conv2dBackward : public SingleOutputNode {
 public:
  Conv2dBackward(Tensor x, Tensor weight, int64_t stride, int64_t padding)
      : SingleOutputNode("Conv2dBackward", true),
        x_(std::move(x)),
        weight_(std::move(weight)),
        stride_(stride),
        padding_(padding) {}

 private:
  TensorList Backward(const Tensor& g) override {
    const std::array<bool, 3> needed = {needs_grad(0), needs_grad(1), needs_grad(2)};  // no bias: never needed
    // Only the gradients some input needs are computed (the first layer's
    // dx, the image batch's, never is); weight and bias gradients are
    // computed from scratch, so straight into their bucket slots.
    ops::Conv2dGrads r =
        ops::Conv2dBackward(g, x_, weight_, stride_, padding_, needed,
                            needed[1] ? OutputBuffer(1, weight_.shape(), g.device()) : Tensor(),
                            needed[2] ? OutputBuffer(2, {weight_.size(0)}, g.device()) : Tensor());
    return {r.dx, r.dweight, r.dbias};
  }
  void ReleaseSaved() override { x_ = weight_ = Tensor(); }
  // Both always: the backward reads x for dweight and weight for dx, and in
  // training neither costs memory (weight is a parameter; x is kept for
  // dweight whenever the weight trains).
  Tensor x_, weight_;
  const int64_t stride_, padding_;
};

class MaxPool2dBackward : public SingleOutputNode {
 public:
  MaxPool2dBackward(Tensor indices, int64_t kernel, Shape x_shape)
      : SingleOutputNode("MaxPool2dBackward", true),
        indices_(std::move(indices)),
        kernel_(kernel),
        x_shape_(std::move(x_shape)) {}

 private:
  TensorList Backward(const Tensor& g) override { return {ops::MaxPool2dBackward(g, indices_, kernel_, x_shape_)}; }
  void ReleaseSaved() override { indices_ = Tensor(); }
  Tensor indices_;
  const int64_t kernel_;
  const Shape x_shape_;
};

}  // namespace

Variable Embedding(const Tensor& ids, const Variable& weight) {
  CheckDefined("Embedding", {&weight});
  Tensor out = ops::Embedding(ids, weight.data());
  return Wrap(std::move(out), MakeNode<EmbeddingBackward>({&weight}, ids, weight.shape()));
}

Variable LayerNorm(const Variable& x, const Variable& weight, const Variable& bias, double eps) {
  CheckDefined("LayerNorm", {&x});
  return LayerNorm(x, weight, bias, eps, x.data().dtype());
}

Variable LayerNorm(const Variable& x, const Variable& weight, const Variable& bias, double eps, DType out_dtype) {
  CheckDefined("LayerNorm", {&x, &weight, &bias});
  ops::LayerNormResult r = ops::LayerNorm(x.data(), weight.data(), bias.data(), eps, out_dtype);
  auto node = MakeNode<LayerNormBackward>({&x, &weight, &bias});
  if (node) {
    node->x = x.data();
    node->weight = weight.data();
    node->mean = std::move(r.mean);
    node->rstd = std::move(r.rstd);
  }
  return Wrap(std::move(r.y), node);
}

std::pair<Variable, Variable> ResidualLayerNorm(const Variable& x, const Variable& a, const Variable& weight,
                                                const Variable& bias, double eps, DType out_dtype) {
  CheckDefined("ResidualLayerNorm", {&x, &a, &weight, &bias});
  ops::ResidualLayerNormResult r = ops::ResidualLayerNorm(x.data(), a.data(), weight.data(), bias.data(), eps, out_dtype);
  auto node = MakeNode<ResidualLayerNormBackward>({&x, &a, &weight, &bias}, a.data().dtype());
  if (node) {
    node->h = r.h;
    node->weight = weight.data();
    node->mean = std::move(r.mean);
    node->rstd = std::move(r.rstd);
  }
  std::vector<Variable> out = WrapOutputs({std::move(r.h), std::move(r.y)}, node);
  return {std::move(out[0]), std::move(out[1])};
}

Variable Mlp(const Variable& x, const MlpParams& p) {
  CheckDefined("Mlp", {&x, &p.fc_weight, &p.fc_bias, &p.proj_weight, &p.proj_bias});
  const Tensor& fc = p.fc_value.defined() ? p.fc_value : p.fc_weight.data();
  const Tensor& proj = p.proj_value.defined() ? p.proj_value : p.proj_weight.data();
  if (x.data().dim() < 1 || fc.dim() != 2 || proj.dim() != 2 || x.data().size(-1) != fc.size(1) ||
      proj.size(1) != fc.size(0) || fc.shape() != p.fc_weight.shape() || proj.shape() != p.proj_weight.shape()) {
    throw TensorError("Mlp: x must be [..., C], the fc weight [H, C] and the proj weight [C', H]; got x " +
                      ShapeToString(x.shape()) + ", fc " + fc.DebugString() + ", proj " + proj.DebugString());
  }
  const Tensor x2 = x.data().Reshape({-1, fc.size(1)});
  ops::LinearGeluResult hidden = ops::LinearGelu(x2, fc, p.fc_bias.data());
  Tensor out = ops::Linear(hidden.y, proj, p.proj_bias.data());
  Shape out_shape = x.shape();
  out_shape.back() = proj.size(0);
  out = out.Reshape(out_shape);
  auto node = MakeNode<MlpBackward>({&x, &p.fc_weight, &p.fc_bias, &p.proj_weight, &p.proj_bias}, x.shape(),
                                    p.fc_weight.data().dtype());
  if (node) {
    node->x = x2;
    node->pre = std::move(hidden.pre);
    node->h = std::move(hidden.y);
    node->fc_value = fc;
    node->proj_value = proj;
  }
  return Wrap(std::move(out), node);
}

Variable Gelu(const Variable& x) {
  CheckDefined("Gelu", {&x});
  Tensor out = ops::Gelu(x.data());
  return Wrap(std::move(out), MakeNode<GeluBackward>({&x}, x.data()));
}

Variable CausalSoftmax(const Variable& scores, double scale) {
  CheckDefined("CausalSoftmax", {&scores});
  Tensor out = ops::CausalSoftmax(scores.data(), scale);
  return Wrap(out, MakeNode<CausalSoftmaxBackward>({&scores}, out, scale));
}

Variable CausalAttention(const Variable& q, const Variable& k, const Variable& v, double scale, bool deterministic) {
  CheckDefined("CausalAttention", {&q, &k, &v});
  ops::AttentionResult r = ops::CausalAttention(q.data(), k.data(), v.data(), scale);
  auto node = MakeNode<CausalAttentionBackward>({&q, &k, &v}, scale, deterministic);
  if (node) {
    node->q = q.data();
    node->k = k.data();
    node->v = v.data();
    node->out = r.out;
    node->lse = std::move(r.lse);
  }
  return Wrap(std::move(r.out), node);
}

Variable Conv2d(const Variable& x, const Variable& weight, const Variable& bias, int64_t stride, int64_t padding) {
  CheckDefined("Conv2d", {&x, &weight});
  Tensor out = ops::Conv2d(x.data(), weight.data(), bias.defined() ? bias.data() : Tensor(), stride, padding);
  auto node = MakeNode<Conv2dBackward>({&x, &weight, bias.defined() ? &bias : nullptr}, x.data(), weight.data(), stride,
                                       padding);
  return Wrap(std::move(out), node);
}

Variable MaxPool2d(const Variable& x, int64_t kernel) {
  CheckDefined("MaxPool2d", {&x});
  ops::MaxPool2dResult r = ops::MaxPool2d(x.data(), kernel);
  return Wrap(std::move(r.y), MakeNode<MaxPool2dBackward>({&x}, std::move(r.indices), kernel, x.shape()));
}

}  // namespace psync::autograd
