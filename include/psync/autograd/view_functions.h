// Differentiable shape functions: reshapes, permutations and splits.
//
// Forward results are views of the input where the tensor library can make
// one (Permute, Transpose and Split always; Reshape when the input is
// contiguous), so the attention layout costs no copies until an op needs
// contiguous data. Backward maps each gradient back to the input's layout:
// Split's node has one output per piece and writes every piece's gradient
// (zeros for a piece that got none) into one tensor of the input's shape.
#pragma once

#include <cstdint>
#include <vector>

#include "psync/autograd/variable.h"

namespace psync::autograd {

// Same elements, another shape (one dim may be -1), like torch.reshape.
Variable Reshape(const Variable& x, const Shape& shape);
// Dimensions reordered: result dim i is x's dim dims[i].
Variable Permute(const Variable& x, const std::vector<int64_t>& dims);
Variable Transpose(const Variable& x, int64_t dim0, int64_t dim1);
// Consecutive pieces of x along `dim` with the given sizes (summing to
// x.size(dim)), like torch.split(x, sizes, dim). One node, several outputs.
std::vector<Variable> Split(const Variable& x, const std::vector<int64_t>& sizes, int64_t dim);

}  // namespace psync::autograd
