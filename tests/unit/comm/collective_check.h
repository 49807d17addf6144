// Shared by the shm and hier group tests: input generators, the size classes
// every allreduce must get right, and the check that a group gives the same
// result as a Gloo group over the same inputs (inside one forked rank).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/subprocess.h"
#include "worker/comm/file_store.h"
#include "worker/comm/process_group_factory.h"
#include "psync/tensor/tensor.h"

namespace psync::comm::testing {

using std::chrono::milliseconds;

inline std::string Msg(const absl::Status& st) { return std::string(st.message()); }
inline bool Has(const absl::Status& st, const std::string& s) { return Msg(st).find(s) != std::string::npos; }

// Small integers: every summation order gives the same, exact result.
inline std::vector<float> IntValues(int rank, size_t n, uint32_t salt = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + rank * 13 + salt) % 31) - 15);
  return v;
}

// Arbitrary floats in [-1, 1): the summation order shows in the last bits.
inline std::vector<float> RandomValues(int rank, size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(rank) * 0xBF58476D1CE4E5B9ULL + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    x ^= x >> 31;
    v[i] = static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1ULL << 24) * 2.0 - 1.0);
  }
  return v;
}

// Element counts around every boundary of the sharded algorithm for
// `ranks` local ranks and slot size `slot_bytes` (pieces of
// slot_bytes/4/ranks floats, rounded down to 16), plus several times the
// whole workspace (2 slots).
inline std::vector<size_t> SizeClasses(int ranks, size_t slot_bytes) {
  const size_t piece = slot_bytes / 4 / static_cast<size_t>(ranks) / 16 * 16;
  const size_t row = piece * static_cast<size_t>(ranks);
  const size_t workspace = 2 * slot_bytes / 4;
  std::vector<size_t> s = {0, 1, 2, 3, 5, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129};
  for (size_t b : {piece, row, 2 * row, workspace}) {
    s.push_back(b - 1);
    s.push_back(b);
    s.push_back(b + 1);
  }
  s.push_back(5 * workspace + 7);
  s.push_back(13 * workspace + 3);
  return s;
}

inline std::shared_ptr<ProcessGroup> MakeGroup(const std::string& backend, const std::string& dir, int rank,
                                               int size, const GroupOptions& base, const std::string& prefix) {
  GroupOptions o = base;
  o.prefix = prefix;
  if (o.job_tag.empty()) o.job_tag = "test";
  auto pg = CreateProcessGroup(backend, std::make_shared<FileStore>(dir), rank, size, o);
  if (!pg.ok()) {
    std::fprintf(stderr, "rank %d: creating %s group: %s\n", rank, backend.c_str(), pg.status().ToString().c_str());
    return nullptr;
  }
  return std::shared_ptr<ProcessGroup>(std::move(*pg));
}

// Inside rank `rank`'s child: for every size, allreduce the same integer
// inputs with `pg` and with `gloo`; both must equal the exact sum, bit for
// bit. Returns 0 or 1 (CHILD_CHECK).
// `in_buffer`: the tensors come from pg.NewCollectiveBuffer (for shm: shared
// memory, reduced in place), odd ones as a view at an offset into a larger
// buffer.
inline int SameAsGloo(int rank, int size, ProcessGroup& pg, ProcessGroup& gloo, const std::vector<size_t>& sizes,
                      bool in_buffer = false) {
  std::vector<std::shared_ptr<Work>> works;
  std::vector<Tensor> ts, gs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t n = sizes[k];
    const std::vector<float> v = IntValues(rank, n, static_cast<uint32_t>(k));
    if (in_buffer) {
      const int64_t lead = k % 2 ? 37 : 0;
      absl::StatusOr<Tensor> b = pg.NewCollectiveBuffer({static_cast<int64_t>(n) + lead}, kFloat32, Device::CPU());
      CHILD_CHECK(rank, b.ok(), b.status().ToString());
      Tensor t = b->View(lead, {static_cast<int64_t>(n)});
      if (n > 0) std::memcpy(t.data<float>(), v.data(), n * sizeof(float));
      ts.push_back(t);
    } else {
      ts.push_back(Tensor::FromVector(v, {static_cast<int64_t>(n)}));
    }
    gs.push_back(Tensor::FromVector(v, {static_cast<int64_t>(n)}));
    // Issued back to back: the group must keep many collectives in flight in order.
    works.push_back(pg.AllreduceSum(ts.back(), "size " + std::to_string(n)));
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    absl::Status st = works[k]->Wait(milliseconds(60000));
    CHILD_CHECK(rank, st.ok(), st.ToString());
    st = gloo.AllreduceSum(gs[k], "gloo size " + std::to_string(sizes[k]))->Wait(milliseconds(60000));
    CHILD_CHECK(rank, st.ok(), st.ToString());
    const std::vector<float> got = ts[k].ToVector(), want_gloo = gs[k].ToVector();
    std::vector<float> exact(sizes[k], 0.0f);
    for (int r = 0; r < size; ++r) {
      const std::vector<float> v = IntValues(r, sizes[k], static_cast<uint32_t>(k));
      for (size_t i = 0; i < v.size(); ++i) exact[i] += v[i];
    }
    CHILD_CHECK(rank, got.size() == sizes[k], "size");
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::memcmp(&got[i], &want_gloo[i], 4) != 0 || got[i] != exact[i]) {
        std::fprintf(stderr, "rank %d: size %zu: element %zu: %s %g, gloo %g, exact %g\n", rank, sizes[k], i,
                     pg.backend().c_str(), got[i], want_gloo[i], exact[i]);
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace psync::comm::testing
