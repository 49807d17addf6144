// Grouped-query attention's sharing of key/value heads, as torch's
// repeat_interleave over the head dim:
//   x [B, T, Hkv, D] -> y [B, T, Hkv * groups, D], y[:, :, h] = x[:, :, h / groups]
// Backward: each kv head's gradient is the sum over its `groups` copies.
// Built from public tensor ops only (Copy into views, AddInPlace), so it runs
// on every device psync does. groups == 1 returns x itself.
#pragma once

#include <cstdint>

#include <psync/psync.h>

namespace llama {

psync::autograd::Variable RepeatKv(const psync::autograd::Variable& x, int64_t groups);

}  // namespace llama
