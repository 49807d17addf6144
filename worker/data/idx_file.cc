#include "worker/data/idx_file.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "psync/common/status_macros.h"
#include "worker/data/gzip_reader.h"
#include "worker/data/source_error.h"

namespace psync::data {

namespace {

// More than any real image set; keeps prod(dims) far from overflow.
constexpr int64_t kMaxIdxBytes = int64_t{1} << 36;

const char* TypeName(uint8_t type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
  }
  return "unknown type";
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdx(const std::string& path, const IdxExpectation& expect, const std::string& flag) {
  auto err = [&](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", msg));
  };
  auto reader_or = GzipReader::Open(path);
  if (!reader_or.ok()) return WithFlag(reader_or.status(), flag);
  GzipReader& reader = **reader_or;
  auto read_exact = [&](void* dst, int64_t n, const std::string& field) -> absl::Status {
    absl::StatusOr<int64_t> got = reader.Read(dst, n);
    if (!got.ok()) return WithFlag(got.status(), flag, absl::StrCat("reading the ", field));
    if (*got != n) {
      return err(absl::StrCat("truncated: the file ends at byte ", reader.position(), " inside the ", field,
                              " (expected ", n, " bytes of it", reader.compressed() ? ", uncompressed" : "", ")"));
    }
    return absl::OkStatus();
  };

  const uint32_t want_magic = IdxUbyteMagic(expect.ndim);
  uint8_t magic[4];
  PSYNC_RETURN_IF_ERROR(read_exact(magic, 4, "magic number"));
  const uint32_t got_magic =
      (uint32_t{magic[0]} << 24) | (uint32_t{magic[1]} << 16) | (uint32_t{magic[2]} << 8) | magic[3];
  if (got_magic != want_magic) {
    std::string why;
    if (magic[0] != 0 || magic[1] != 0) {
      why = "not an IDX file: its first two bytes are not zero";
    } else if (magic[2] != 0x08) {
      why = absl::StrFormat("element type 0x%02X (%s), expected 0x08 (unsigned byte)", magic[2], TypeName(magic[2]));
    } else {
      why = absl::StrCat("dimension count ", static_cast<int>(magic[3]), ", expected ", expect.ndim, " (", expect.what,
                         ")");
    }
    return err(absl::StrFormat("magic number is 0x%08X, expected 0x%08X (%s: unsigned bytes, %d dimension%s): %s",
                               got_magic, want_magic, expect.what, expect.ndim, expect.ndim == 1 ? "" : "s", why));
  }

  IdxArray out;
  int64_t total = 1;
  for (int d = 0; d < expect.ndim; ++d) {
    const std::string& name = expect.dim_names[d];
    uint8_t b[4];
    PSYNC_RETURN_IF_ERROR(read_exact(b, 4, absl::StrCat("dimension ", d, " (", name, ")")));
    const int64_t v = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    const int64_t want = expect.dims[d];
    if (want > 0 && v != want) {
      return err(absl::StrCat("dimension ", d, " (", name, ") is ", v, ", expected ", want));
    }
    if (v < 1) return err(absl::StrCat("dimension ", d, " (", name, ") is 0, expected at least 1"));
    if (v > kMaxIdxBytes / total) {
      return err(
          absl::StrCat("dimension ", d, " (", name, ") is ", v, ": the payload would exceed ", kMaxIdxBytes, " bytes"));
    }
    total *= v;
    out.dims.push_back(v);
  }

  const int64_t header = 4 + 4 * int64_t{expect.ndim};
  out.data.resize(static_cast<size_t>(total));
  absl::StatusOr<int64_t> got = reader.Read(out.data.data(), total);
  if (!got.ok()) return WithFlag(got.status(), flag, absl::StrCat("reading the ", expect.what));
  if (*got != total) {
    std::string dims;
    for (size_t d = 0; d < out.dims.size(); ++d) absl::StrAppend(&dims, d ? " x " : "", out.dims[d]);
    return err(absl::StrCat("truncated: the header announces ", dims, " = ", total, " bytes of ", expect.what,
                            " after the ", header, "-byte header, the file holds ", *got, " of them (expected ",
                            header + total, " bytes", reader.compressed() ? " uncompressed" : "", ", got ",
                            header + *got, ")"));
  }
  // Anything after the payload: count it (bounded by the file) to say how much.
  int64_t trailing = 0;
  char scratch[1 << 16];
  for (;;) {
    absl::StatusOr<int64_t> more = reader.Read(scratch, sizeof(scratch));
    if (!more.ok()) return WithFlag(more.status(), flag, absl::StrCat("after the ", expect.what));
    if (*more == 0) break;
    trailing += *more;
  }
  if (trailing > 0) {
    return err(absl::StrCat(trailing, " trailing bytes after the ", total, " bytes of ", expect.what,
                            " the header announces (expected the file to end at byte ", header + total,
                            reader.compressed() ? " uncompressed" : "", ")"));
  }
  return out;
}

}  // namespace psync::data
