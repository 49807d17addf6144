#include "worker/autograd/nn_functions.h"

#include <utility>

#include "worker/autograd/function_node.h"
#include "worker/tensor/ops.h"

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

}  // namespace

Variable Embedding(const Tensor& ids, const Variable& weight) {
  CheckDefined("Embedding", {&weight});
  Tensor out = ops::Embedding(ids, weight.data());
  return Wrap(std::move(out), MakeNode<EmbeddingBackward>({&weight}, ids, weight.shape()));
}

Variable LayerNorm(const Variable& x, const Variable& weight, const Variable& bias, double eps) {
  CheckDefined("LayerNorm", {&x, &weight, &bias});
  ops::LayerNormResult r = ops::LayerNorm(x.data(), weight.data(), bias.data(), eps);
  auto node = MakeNode<LayerNormBackward>({&x, &weight, &bias});
  if (node) {
    node->x = x.data();
    node->weight = weight.data();
    node->mean = std::move(r.mean);
    node->rstd = std::move(r.rstd);
  }
  return Wrap(std::move(r.y), node);
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

}  // namespace psync::autograd
