// GoogleTest's face of psync::autograd::GradCheck (psync/autograd/gradcheck.h):
//
//   EXPECT_TRUE(GradOk([](const std::vector<Variable>& v) { return Gelu(v[0]); },
//                         {RandomDouble({4, 8}, 1)}));
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "psync/autograd/engine.h"
#include "psync/autograd/functions.h"
#include "psync/autograd/gradcheck.h"
#include "psync/tensor/ops.h"

namespace psync::autograd::testing {

using autograd::GradCheckOptions;
using autograd::GradFn;
using autograd::RandomDouble;

inline ::testing::AssertionResult GradOk(const GradFn& fn, const std::vector<Tensor>& inputs,
                                            GradCheckOptions opt = {}) {
  const absl::Status st = autograd::GradCheck(fn, inputs, opt);
  if (st.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << st.message();
}

}  // namespace psync::autograd::testing
