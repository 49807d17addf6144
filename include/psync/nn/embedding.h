// Embedding: a lookup table weight [num, dim]; ids int64 [...] -> [..., dim],
// like torch.nn.Embedding. Its gradient is a deterministic scatter-add.
#pragma once

#include "psync/nn/module.h"

namespace psync::nn {

class Embedding : public Module {
 public:
  explicit Embedding(Tensor weight);
  // `ids` wraps an int64 tensor (it needs no gradient).
  Variable Forward(const Variable& ids) override;
  const Parameter& weight() const { return weight_; }

 private:
  Parameter weight_;
};

}  // namespace psync::nn
