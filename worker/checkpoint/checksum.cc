#include "worker/checkpoint/checksum.h"

#include <zlib.h>

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "psync/common/status_from_exception.h"
#include "worker/safetensors/safetensors.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checksum.cc assumes a little-endian host"
#endif

namespace psync::checkpoint {
namespace {

// Running CRC-32 over the canonical stream.
class Crc {
 public:
  void Bytes(const void* p, size_t n) {
    crc_ = crc32_z(crc_, static_cast<const Bytef*>(p), n);
  }
  void U64(uint64_t v) { Bytes(&v, sizeof(v)); }  // little-endian host
  void Str(absl::string_view s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  uint32_t value() const { return static_cast<uint32_t>(crc_); }

 private:
  uLong crc_ = crc32_z(0L, Z_NULL, 0);
};

}  // namespace

absl::StatusOr<std::string> ContentChecksum(const Metadata& metadata, const NamedTensors& tensors) {
  Crc crc;
  crc.Str("psync-checkpoint-crc-v1");
  for (const auto& [key, value] : metadata) {
    if (key == kChecksumKey) continue;
    crc.Str(key);
    crc.Str(value);
  }
  for (const auto& [name, t] : tensors) {
    crc.Str(name);
    crc.Str(safetensors::DTypeTag(t.dtype()));
    crc.U64(t.shape().size());
    for (int64_t d : t.shape()) crc.U64(static_cast<uint64_t>(d));
    crc.U64(t.nbytes());
    if (t.nbytes() == 0) continue;
    absl::Status st = RunCatching(absl::StrCat("checksum of tensor '", name, "' (", t.DebugString(), ")"), [&] {
      const Tensor host = t.To(Device::CPU()).Contiguous();  // the same handle for a contiguous CPU tensor
      crc.Bytes(host.raw_data(), host.nbytes());
    });
    if (!st.ok()) return st;
  }
  return absl::StrFormat("crc32:%08x", crc.value());
}

}  // namespace psync::checkpoint
