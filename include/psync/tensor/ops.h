// Every tensor op, by family (one header each under ops/). Each op checks
// its arguments (defined, one device, dtypes, shapes) and throws TensorError
// naming the op and every operand, then runs the kernels of the inputs'
// device: cpu/ (OpenBLAS + loops) or cuda/ (cuBLAS + kernels, asynchronous
// on the device's compute stream). The choice of device happens in exactly
// one place per family (<Family>KernelsFor in ops/<family>.cc).
//
// Adding an op: declare it in ops/<family>.h, validate + dispatch in
// ops/<family>.cc, add the kernel to ops/<family>_kernels.h and implement it
// in cpu/<family>.cc and cuda/<family>.cu.
#pragma once

#include "psync/tensor/ops/attention.h"
#include "psync/tensor/ops/blas.h"
#include "psync/tensor/ops/copy.h"
#include "psync/tensor/ops/nn.h"
#include "psync/tensor/ops/optim.h"
#include "psync/tensor/ops/pointwise.h"
#include "psync/tensor/ops/reduce.h"
