#include "worker/tensor/cpu/onednn_gemm.h"

#include <cblas.h>
#include <omp.h>

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/tensor/cpu/vec_math.h"
#include "psync/tensor/tensor.h"

namespace psync::cpu {
namespace {

using dt = dnnl::memory::data_type;

// An operand as oneDNN's brgemm kernels want it: each matrix dense (row
// stride = row length, as stored: [rows, cols], trans or not) and the batch
// one stride apart, or one matrix shared by every batch entry.
struct Dense {
  const void* data = nullptr;
  bool trans = false;
  bool broadcast = false;  // one matrix for the whole batch
  Tensor scratch;          // holds a copy when the original was not dense
};

// Copies rows of `cols` elements, `ld` apart, to `out` densely (compiled for
// AVX-512 and AVX2 too: the attention's rows are 32-64 elements, where the
// copy is mostly per-row overhead).
PSYNC_CPU_CLONES void GatherRows(const uint16_t* in, int64_t ld, int64_t rows, int64_t cols, uint16_t* out) {
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* __restrict src = in + i * ld;
    uint16_t* __restrict dst = out + i * cols;
    for (int64_t j = 0; j < cols; ++j) dst[j] = src[j];
  }
}

// rows x cols: the stored matrix of an operand whose product side is
// [r, c] (op = transpose when trans).
Dense MakeDense(const ops::GemmOperand& op, int64_t r, int64_t c, const Shape& batch_shape) {
  const int64_t rows = op.trans ? c : r, cols = op.trans ? r : c, mat = rows * cols;
  Dense d;
  d.trans = op.trans;
  bool dense = op.ld == cols || rows <= 1;
  bool zero = true;
  for (int64_t s : op.batch_strides) zero = zero && s == 0;
  bool collapses = true;
  int64_t want = mat;
  for (size_t i = batch_shape.size(); i-- > 0;) {
    if (op.batch_strides[i] != want && batch_shape[i] != 1) collapses = false;
    want *= batch_shape[i];
  }
  if (dense && (batch_shape.empty() || collapses || zero)) {
    d.data = op.data;
    d.broadcast = !batch_shape.empty() && zero && !collapses;
    return d;
  }
  // Gather each matrix's rows into [batch, rows, cols].
  const int64_t batch = NumelOf(batch_shape);
  d.scratch = Tensor::Empty({batch, rows, cols}, kBFloat16);
  uint16_t* dst = static_cast<uint16_t*>(d.scratch.raw_data());
  const uint16_t* src = static_cast<const uint16_t*>(op.data);
  std::vector<int64_t> idx(batch_shape.size(), 0);
  int64_t off = 0;
  for (int64_t b = 0; b < batch; ++b) {
    GatherRows(src + off, op.ld, rows, cols, dst + b * rows * cols);
    for (size_t k = batch_shape.size(); k-- > 0;) {
      off += op.batch_strides[k];
      if (++idx[k] < batch_shape[k]) break;
      off -= op.batch_strides[k] * batch_shape[k];
      idx[k] = 0;
    }
  }
  d.data = d.scratch.raw_data();
  return d;
}

// The memory descriptor of a dense operand with product side [r, c].
dnnl::memory::desc OperandDesc(const Dense& d, int64_t batch, int64_t r, int64_t c) {
  const dnnl::memory::dims strides2 = d.trans ? dnnl::memory::dims{1, r} : dnnl::memory::dims{c, 1};
  if (batch == 0) return dnnl::memory::desc({r, c}, dt::bf16, strides2);
  return dnnl::memory::desc({d.broadcast ? 1 : batch, r, c}, dt::bf16, {r * c, strides2[0], strides2[1]});
}

// What decides a primitive: every operand is dense, so the shapes, the
// transposes, broadcasting, the bias and the output type.
struct Key {
  int64_t batch, m, n, k;
  bool ta, tb, a_broadcast, b_broadcast, bias, c_bf16;
  bool operator==(const Key& o) const {
    return batch == o.batch && m == o.m && n == o.n && k == o.k && ta == o.ta && tb == o.tb &&
           a_broadcast == o.a_broadcast && b_broadcast == o.b_broadcast && bias == o.bias && c_bf16 == o.c_bf16;
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<int64_t>()(k.batch);
    for (int64_t v : {k.m, k.n, k.k}) h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h * 31u + (k.ta | k.tb << 1 | k.a_broadcast << 2 | k.b_broadcast << 3 | k.bias << 4 | k.c_bf16 << 5);
  }
};

// A primitive with its memory objects, whose data handles are set per call
// (no descriptor, memory object or argument map is built per call).
struct Entry {
  dnnl::matmul primitive;
  dnnl::memory a, b, c, bias;
  std::unordered_map<int, dnnl::memory> args;
};

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // Primitives by shape: oneDNN caches them too, but a lookup here is
  // cheaper than rebuilding the descriptors (a few microseconds per call,
  // which matters for the attention's small products).
  std::unordered_map<Key, Entry, KeyHash> primitives;
};

// One per thread: a oneDNN stream is not thread-safe, and a thread's
// primitives are only ever run by it.
Context& ThreadContext() {
  thread_local Context ctx;
  return ctx;
}

void Run(const ops::GemmArgs& g) {
  if (g.dtype != kBFloat16 || (g.c.dtype() != kBFloat16 && g.c.dtype() != kFloat32) ||
      (g.epilogue != ops::Epilogue::kNone && g.epilogue != ops::Epilogue::kBias)) {
    throw TensorError(absl::StrCat("Matmul: oneDNN path got ", DTypeName(g.dtype), " -> ", DTypeName(g.c.dtype()),
                                   " (internal error)"));
  }
  const int threads = openblas_get_num_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  const int64_t batch = g.batch_shape.empty() ? 0 : g.batch();
  Dense a = MakeDense(g.a, g.m, g.k, g.batch_shape);
  Dense b = MakeDense(g.b, g.k, g.n, g.batch_shape);
  const bool bias = g.epilogue == ops::Epilogue::kBias;
  const dt c_type = g.c.dtype() == kBFloat16 ? dt::bf16 : dt::f32;

  Context& ctx = ThreadContext();
  const Key key{batch, g.m, g.n, g.k, a.trans, b.trans, a.broadcast, b.broadcast, bias, c_type == dt::bf16};
  auto it = ctx.primitives.find(key);
  if (it == ctx.primitives.end()) {
    const dnnl::memory::desc a_md = OperandDesc(a, batch, g.m, g.k);
    const dnnl::memory::desc b_md = OperandDesc(b, batch, g.k, g.n);
    const dnnl::memory::desc c_md = batch == 0 ? dnnl::memory::desc({g.m, g.n}, c_type, {g.n, 1})
                                               : dnnl::memory::desc({batch, g.m, g.n}, c_type, {g.m * g.n, g.n, 1});
    const dnnl::memory::desc bias_md = batch == 0 ? dnnl::memory::desc({1, g.n}, dt::f32, {g.n, 1})
                                                  : dnnl::memory::desc({1, 1, g.n}, dt::f32, {g.n, g.n, 1});
    const dnnl::matmul::desc desc =
        bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md);
    Entry e;
    e.primitive = dnnl::matmul(dnnl::matmul::primitive_desc(desc, ctx.engine));
    e.a = dnnl::memory(a_md, ctx.engine, nullptr);
    e.b = dnnl::memory(b_md, ctx.engine, nullptr);
    e.c = dnnl::memory(c_md, ctx.engine, nullptr);
    e.args = {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}};
    if (bias) {
      e.bias = dnnl::memory(bias_md, ctx.engine, nullptr);
      e.args.emplace(DNNL_ARG_BIAS, e.bias);
    }
    it = ctx.primitives.emplace(key, std::move(e)).first;
  }
  Entry& e = it->second;
  e.a.set_data_handle(const_cast<void*>(a.data));
  e.b.set_data_handle(const_cast<void*>(b.data));
  e.c.set_data_handle(g.c.raw_data());
  if (bias) e.bias.set_data_handle(g.bias.raw_data());
  e.primitive.execute(ctx.stream, e.args);
  ctx.stream.wait();
}

}  // namespace

void OneDnnGemm(const ops::GemmArgs& g) {
  try {
    Run(g);
  } catch (const dnnl::error& e) {
    throw TensorError(absl::StrCat("Matmul: oneDNN failed on ", DTypeName(g.dtype), " m=", g.m, " n=", g.n, " k=", g.k,
                                   " (batch ", g.batch(), "): ", e.what()));
  }
}

}  // namespace psync::cpu
