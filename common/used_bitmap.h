// The used-parameter bitmap of coordinator.proto (Report.used_bitmap,
// Plan.globally_unused): one bit per parameter in manifest order, parameter
// p in byte p/8 at bit p%8 (LSB first). The one codec for it: the worker
// packs its local used flags, the coordinator ORs and reads them, the
// worker unpacks the plan's set. In memory the flags are one byte each
// (non-zero = set), the form the reducer and the trainer work with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace psync::bitmap {

// ceil(n / 8): the wire size for n parameters.
constexpr int64_t BytesFor(int64_t n) { return (n + 7) / 8; }

// Bit i of `bm`; false beyond its end.
bool Get(const std::string& bm, int64_t i);

// One byte per parameter (non-zero = set) to BytesFor(flags.size()) bytes.
std::string Pack(const std::vector<uint8_t>& flags);

// The first `n` bits of `bm` as bytes 0/1 (bits beyond its end read 0).
std::vector<uint8_t> Unpack(const std::string& bm, size_t n);

}  // namespace psync::bitmap
