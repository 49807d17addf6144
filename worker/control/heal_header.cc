#include "worker/control/heal_header.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/crc32c.h"

namespace psync::control {
namespace {

constexpr char kTag[] = "psync-heal/2";
constexpr int64_t kMaxDims = 16;

class Writer {
 public:
  void U64(uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void Str(absl::string_view s) {
    U64(s.size());
    out_.append(s.data(), s.size());
  }
  std::string Finish() {
    const uint32_t crc = Crc32c(out_.data(), out_.size());
    out_.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
    return std::move(out_);
  }

 private:
  std::string out_;
};

// Reads what Writer wrote; the first short read sets ok() false and every
// read after it gives zeros, so a decoder checks once per section.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  uint64_t U64() {
    uint64_t v = 0;
    if (!Take(sizeof(v))) return 0;
    std::memcpy(&v, in_.data() + at_ - sizeof(v), sizeof(v));
    return v;
  }
  std::string Str() {
    const uint64_t n = U64();
    if (!Take(static_cast<size_t>(n))) return {};
    return std::string(in_.substr(at_ - n, n));
  }
  // A count of items of at least `each` bytes: never more than could fit.
  bool Count(uint64_t n, size_t each) { return ok_ && n <= (in_.size() - at_) / each; }
  bool ok() const { return ok_; }
  bool done() const { return at_ == in_.size(); }

 private:
  bool Take(size_t n) {
    if (!ok_ || n > in_.size() - at_) return ok_ = false;
    at_ += n;
    return true;
  }
  absl::string_view in_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace

size_t HealEntry::nbytes() const {
  size_t n = ElementSize(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<HealPiece> PlanHealPieces(const std::vector<HealEntry>& entries, size_t chunk_bytes) {
  std::vector<HealPiece> pieces;
  HealPiece pack;  // the packed piece being filled
  pack.packed = true;
  auto close_pack = [&] {
    if (pack.bytes > 0) pieces.push_back(std::move(pack));
    pack = HealPiece();
    pack.packed = true;
  };
  for (size_t e = 0; e < entries.size(); ++e) {
    const size_t n = entries[e].nbytes();
    if (n == 0) continue;
    if (n < std::min(kPackBelow, chunk_bytes)) {
      if (pack.bytes + n > chunk_bytes) close_pack();
      pack.slices.push_back(HealSlice{e, 0, n});
      pack.bytes += n;
      continue;
    }
    // Why close the pack first: the pieces keep the entries' order, which
    // is the order the source reads its state in.
    close_pack();
    const size_t elem = ElementSize(entries[e].dtype);
    const size_t window = std::max(elem, chunk_bytes / elem * elem);
    for (size_t off = 0; off < n; off += window) {
      const size_t bytes = std::min(window, n - off);
      pieces.push_back(HealPiece{{HealSlice{e, off, bytes}}, bytes, false});
    }
  }
  close_pack();
  return pieces;
}

std::string EncodeHealHeader(const HealHeader& h) {
  Writer w;
  w.Str(kTag);
  w.U64(h.chunk_bytes);
  w.U64(h.metadata.size());
  for (const auto& [key, value] : h.metadata) {
    w.Str(key);
    w.Str(value);
  }
  w.U64(h.entries.size());
  for (const HealEntry& e : h.entries) {
    w.Str(e.name);
    w.U64(static_cast<uint64_t>(e.dtype));
    w.U64(e.shape.size());
    for (int64_t d : e.shape) w.U64(static_cast<uint64_t>(d));
  }
  w.U64(h.crcs.size());
  for (uint32_t c : h.crcs) w.U64(c);
  return w.Finish();
}

absl::StatusOr<HealHeader> DecodeHealHeader(absl::string_view text, const std::string& source) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(source, ": the heal header (", text.size(), " bytes) ", why,
                                            " (every rank must run the same psync build)"));
  };
  uint32_t crc = 0;
  if (text.size() < sizeof(crc)) return bad("is cut short");
  std::memcpy(&crc, text.data() + text.size() - sizeof(crc), sizeof(crc));
  const absl::string_view body = text.substr(0, text.size() - sizeof(crc));
  if (Crc32c(body.data(), body.size()) != crc) return bad("does not match its CRC-32C");
  Reader r(body);
  HealHeader h;
  if (r.Str() != kTag) return bad(absl::StrCat("does not start with ", kTag));
  h.chunk_bytes = r.U64();
  if (h.chunk_bytes < kMinHealChunk) return bad(absl::StrCat("has chunks of ", h.chunk_bytes, " bytes"));
  const uint64_t keys = r.U64();
  if (!r.Count(keys, 16)) return bad("is cut short in its metadata");
  for (uint64_t i = 0; i < keys; ++i) {
    std::string key = r.Str();
    h.metadata[std::move(key)] = r.Str();
  }
  const uint64_t entries = r.U64();
  if (!r.Count(entries, 24)) return bad("is cut short in its tensor list");
  std::set<std::string> names;
  for (uint64_t i = 0; i < entries && r.ok(); ++i) {
    HealEntry e;
    e.name = r.Str();
    const uint64_t dtype = r.U64();
    const uint64_t dims = r.U64();
    if (!r.ok()) break;
    if (e.name.empty() || !names.insert(e.name).second) {
      return bad(absl::StrCat("names tensor ", i, " '", e.name.substr(0, 80), "' empty or twice"));
    }
    if (dtype > static_cast<uint64_t>(DType::kInt64) || dims > kMaxDims) {
      return bad(absl::StrCat("gives tensor '", e.name, "' dtype ", dtype, " and ", dims, " dimensions"));
    }
    e.dtype = static_cast<DType>(dtype);
    size_t bytes = ElementSize(e.dtype);
    for (uint64_t d = 0; d < dims; ++d) {
      const uint64_t n = r.U64();
      if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (n > 0 && bytes > std::numeric_limits<size_t>::max() / 2 / n)) {
        return bad(absl::StrCat("gives tensor '", e.name, "' an impossible shape"));
      }
      bytes *= static_cast<size_t>(n);
      e.shape.push_back(static_cast<int64_t>(n));
    }
    h.entries.push_back(std::move(e));
  }
  const uint64_t crcs = r.U64();
  if (!r.Count(crcs, 8)) return bad("is cut short in its CRC list");
  for (uint64_t i = 0; i < crcs; ++i) h.crcs.push_back(static_cast<uint32_t>(r.U64()));
  if (!r.ok() || !r.done()) return bad(r.ok() ? "has trailing bytes" : "is cut short");
  if (h.crcs.size() != PlanHealPieces(h.entries, h.chunk_bytes).size()) {
    return bad(absl::StrCat("lists ", h.crcs.size(), " CRCs for ",
                            PlanHealPieces(h.entries, h.chunk_bytes).size(), " pieces"));
  }
  return h;
}

std::string DescribeHealPiece(const HealHeader& header, const std::vector<HealPiece>& pieces, size_t index) {
  const HealPiece& p = pieces[index];
  std::vector<std::string> names;
  for (const HealSlice& s : p.slices) {
    if (names.size() == 3) {
      names.push_back(absl::StrCat("and ", p.slices.size() - 3, " more"));
      break;
    }
    names.push_back(absl::StrCat("'", header.entries[s.entry].name, "'"));
  }
  return absl::StrCat("piece ", index, " of ", pieces.size(), " (", p.bytes, " bytes of ",
                      p.slices.size() == 1 ? "tensor " : "tensors ", absl::StrJoin(names, ", "), ")");
}

}  // namespace psync::control
