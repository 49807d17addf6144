#include "worker/safetensors/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/json.h"
#include "psync/common/status_from_exception.h"
#include "psync/common/status_macros.h"

// The format is little-endian; we copy bytes straight into tensor storage.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.cc assumes a little-endian host"
#endif

namespace psync::safetensors {
const char* DTypeTag(DType dtype) {
  switch (dtype) {
    case kFloat32: return "F32";
    case kFloat64: return "F64";
    case kBFloat16: return "BF16";
    case kFloat16: return "F16";
    case kInt64: return "I64";
  }
  return "?";
}

absl::StatusOr<DType> DTypeFromTag(absl::string_view name) {
  for (DType d : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64}) {
    if (name == DTypeTag(d)) return d;
  }
  return absl::InvalidArgumentError("supported dtypes are F32, F64, BF16, F16 and I64");
}

namespace {

constexpr char kMetadataKey[] = "__metadata__";
constexpr uint64_t kPrefixBytes = 8;

// One tensor as described by the header.
struct Entry {
  std::string name;
  Shape shape;
  DType dtype = kFloat32;
  uint64_t begin = 0;  // relative to the start of the data section
  uint64_t end = 0;
};

struct Header {
  std::vector<Entry> entries;  // sorted by (begin, end)
  std::map<std::string, std::string> metadata;
};

absl::Status Corrupt(const std::string& source, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("safetensors file ", source, ": ", problem));
}

std::string TensorRef(const std::string& name) { return absl::StrCat("tensor ", json::Quote(name)); }

uint64_t ReadLe64(const char* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof(v));  // little-endian host (checked above)
  return v;
}

// Validates the length prefix against the total size; returns N.
absl::StatusOr<uint64_t> CheckPrefix(const char* prefix, uint64_t total_size, const std::string& source) {
  uint64_t n = ReadLe64(prefix);
  if (n > kMaxHeaderBytes) {
    return Corrupt(source, absl::StrFormat(
        "header length %d is over the %d-byte limit; the file is corrupt or not a safetensors file",
        n, kMaxHeaderBytes));
  }
  if (n > total_size - kPrefixBytes) {
    return Corrupt(source, absl::StrFormat(
        "header length %d is larger than the %d bytes that follow the 8-byte length prefix; "
        "the file is truncated or not a safetensors file",
        n, total_size - kPrefixBytes));
  }
  if (n < 2) {
    return Corrupt(source, absl::StrFormat("header length %d is too small to hold a JSON object", n));
  }
  return n;
}

absl::Status CheckTotalSize(uint64_t total_size, const std::string& source) {
  if (total_size < kPrefixBytes) {
    return Corrupt(source, absl::StrFormat(
        "file is %d bytes, too short for a safetensors file (it starts with an 8-byte header length)",
        total_size));
  }
  return absl::OkStatus();
}

// Reads a non-negative integer from a JSON value; `what` describes it for errors.
absl::StatusOr<uint64_t> NonNegativeInt(const json::Json& v, const std::string& source,
                                        const std::string& what) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    return Corrupt(source, absl::StrCat(what, " is ", json::Serialize(v),
                                        ", not a non-negative integer"));
  }
  return v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
}

// The member `key` of object `o`, or null.
const json::Json* Member(const json::Json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

absl::StatusOr<Entry> ParseEntry(const std::string& name, const json::Json& info, const std::string& source) {
  const std::string ref = TensorRef(name);
  if (name.empty()) {
    // The format allows it, but no state_dict has one and our writer refuses
    // to produce one; an empty key is a sign of a broken writer.
    return Corrupt(source, "a tensor has an empty name");
  }
  if (!info.is_object()) {
    return Corrupt(source, absl::StrCat(ref, ": header entry is a JSON ", json::TypeName(info),
                                        ", expected an object with dtype, shape and data_offsets"));
  }
  for (auto it = info.begin(); it != info.end(); ++it) {
    const std::string& key = it.key();
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Corrupt(source, absl::StrCat(ref, ": unknown field ", json::Quote(key),
                                          " (expected only dtype, shape and data_offsets)"));
    }
  }
  const json::Json* dtype = Member(info, "dtype");
  const json::Json* shape = Member(info, "shape");
  const json::Json* offsets = Member(info, "data_offsets");
  for (auto [field, value] : {std::pair<const char*, const json::Json*>{"dtype", dtype},
                              {"shape", shape}, {"data_offsets", offsets}}) {
    if (value == nullptr) return Corrupt(source, absl::StrCat(ref, ": missing field \"", field, "\""));
  }
  if (!dtype->is_string()) {
    return Corrupt(source, absl::StrCat(ref, ": dtype is ", json::Serialize(*dtype), ", expected a string"));
  }
  absl::StatusOr<DType> dt = DTypeFromTag(dtype->get<std::string>());
  if (!dt.ok()) {
    return Corrupt(source, absl::StrCat(ref, " has dtype ", dtype->get<std::string>(), "; ", dt.status().message(),
                                        " (convert the tensor before saving, e.g. {k: v.float() for k, v in "
                                        "state_dict.items()})"));
  }

  Entry e;
  e.name = name;
  e.dtype = *dt;
  if (!shape->is_array()) {
    return Corrupt(source, absl::StrCat(ref, ": shape is ", json::Serialize(*shape),
                                        ", expected a list of non-negative integers"));
  }
  bool has_zero = false;
  for (size_t i = 0; i < shape->size(); ++i) {
    auto d = NonNegativeInt((*shape)[i], source, absl::StrCat(ref, ": shape[", i, "]"));
    if (!d.ok()) return d.status();
    has_zero |= (*d == 0);
    e.shape.push_back(static_cast<int64_t>(*d));
  }
  // Element count with overflow checks (a hostile header could claim 2^62 x 2^62).
  uint64_t numel = 1;
  if (has_zero) {
    numel = 0;
  } else {
    for (int64_t d : e.shape) {
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) || numel > (UINT64_MAX / 4)) {
        return Corrupt(source, absl::StrCat(ref, ": shape ", ShapeToString(e.shape),
                                            " has more elements than can be addressed"));
      }
    }
  }

  if (!offsets->is_array() || offsets->size() != 2) {
    return Corrupt(source, absl::StrCat(ref, ": data_offsets is ", json::Serialize(*offsets),
                                        ", expected [begin, end]"));
  }
  auto begin = NonNegativeInt((*offsets)[0], source, absl::StrCat(ref, ": data_offsets[0]"));
  if (!begin.ok()) return begin.status();
  auto end = NonNegativeInt((*offsets)[1], source, absl::StrCat(ref, ": data_offsets[1]"));
  if (!end.ok()) return end.status();
  if (*end < *begin) {
    return Corrupt(source, absl::StrFormat("%s: data_offsets [%d, %d] end before they begin", ref, *begin, *end));
  }
  e.begin = *begin;
  e.end = *end;
  const uint64_t want = numel * ElementSize(e.dtype);
  if (e.end - e.begin != want) {
    return Corrupt(source, absl::StrFormat(
        "%s: shape %s with dtype %s needs %d bytes but data_offsets [%d, %d] span %d bytes",
        ref, ShapeToString(e.shape), DTypeTag(e.dtype), want, e.begin, e.end, e.end - e.begin));
  }
  return e;
}

// Parses and validates the JSON header against a data section of `data_len` bytes.
absl::StatusOr<Header> ParseHeader(absl::string_view text, uint64_t data_len, const std::string& source) {
  json::ParseOptions opt;
  opt.max_size = kMaxHeaderBytes;
  auto parsed = json::Parse(text, opt);
  if (!parsed.ok()) {
    // Byte offsets in the JSON error are relative to the header, which starts
    // at file offset 8; say so to make hexdump debugging easy.
    return Corrupt(source, absl::StrCat("invalid JSON header (byte offsets count from file offset 8): ",
                                        parsed.status().message()));
  }
  if (!parsed->is_object()) {
    return Corrupt(source, absl::StrCat("header is a JSON ", json::TypeName(*parsed),
                                        ", expected an object mapping tensor names to their info"));
  }
  Header h;
  for (auto entry = parsed->begin(); entry != parsed->end(); ++entry) {
    const std::string& name = entry.key();
    const json::Json& info = entry.value();
    if (name == kMetadataKey) {
      if (!info.is_object()) {
        return Corrupt(source, absl::StrCat("__metadata__ is a JSON ", json::TypeName(info),
                                            ", expected an object of strings"));
      }
      for (auto kv = info.begin(); kv != info.end(); ++kv) {
        const std::string& k = kv.key();
        const json::Json& v = kv.value();
        if (!v.is_string()) {
          return Corrupt(source, absl::StrCat("__metadata__ value for ", json::Quote(k), " is ",
                                              json::Serialize(v), ", expected a string"));
        }
        h.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    auto e = ParseEntry(name, info, source);
    if (!e.ok()) return e.status();
    if (e->end > data_len) {
      return Corrupt(source, absl::StrFormat(
          "%s: data_offsets [%d, %d] run past the end of the data section (%d bytes); "
          "the file is truncated or corrupt",
          TensorRef(name), e->begin, e->end, data_len));
    }
    h.entries.push_back(std::move(*e));
  }
  // The ranges must tile the data section exactly, like the reference
  // implementation's validate(): this rejects overlapping tensors (which
  // would alias on load) and hidden bytes between or after tensors.
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : h.entries) {
    if (e.begin < covered) {
      return Corrupt(source, absl::StrFormat("%s (bytes [%d, %d]) overlaps %s (bytes [%d, %d])",
                                             TensorRef(e.name), e.begin, e.end, TensorRef(prev->name),
                                             prev->begin, prev->end));
    }
    if (e.begin > covered) {
      return Corrupt(source, absl::StrFormat(
          "gap in the data section: bytes [%d, %d] before %s belong to no tensor", covered, e.begin,
          TensorRef(e.name)));
    }
    covered = e.end;
    prev = &e;
  }
  if (covered != data_len) {
    return Corrupt(source, absl::StrFormat(
        "data section is %d bytes but the tensors cover only the first %d; "
        "the header does not describe the whole file",
        data_len, covered));
  }
  return h;
}

absl::Status ErrnoStatus(int err, const std::string& what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { if (fd_ >= 0) ::close(fd_); }
  int release() { int f = fd_; fd_ = -1; return f; }
 private:
  int fd_;
};

// Reads exactly `n` bytes at `offset`; a short read means the file changed
// size under us (or is truncated), which is reported as corruption.
absl::Status PreadAll(int fd, char* buf, uint64_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    ssize_t r = ::pread(fd, buf, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("reading safetensors file ", path));
    }
    if (r == 0) {
      return Corrupt(path, absl::StrFormat("unexpected end of file at byte %d (did it shrink while reading?)", offset));
    }
    buf += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

// Allocates CPU tensors for the entries; `fill` copies the bytes in.
template <typename Fill>
absl::StatusOr<Contents> Materialize(Header h, const std::string& source, Fill fill) {
  Contents out;
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.entries.size());
  for (const Entry& e : h.entries) {
    Tensor t;
    try {
      t = Tensor::Empty(e.shape, e.dtype, Device::CPU());
    } catch (const std::exception& ex) {
      return absl::ResourceExhaustedError(absl::StrCat("safetensors file ", source, ": cannot allocate ",
                                                       TensorRef(e.name), " ", ShapeToString(e.shape), ": ",
                                                       ex.what()));
    }
    if (e.end > e.begin) {
      absl::Status st = fill(e, static_cast<char*>(t.raw_data()));
      if (!st.ok()) return st;
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace

absl::StatusOr<Contents> ParseWithMetadata(absl::string_view bytes,
                                                                 const std::string& source_name) {
  absl::Status st = CheckTotalSize(bytes.size(), source_name);
  if (!st.ok()) return st;
  auto n = CheckPrefix(bytes.data(), bytes.size(), source_name);
  if (!n.ok()) return n.status();
  const uint64_t data_start = kPrefixBytes + *n;
  auto h = ParseHeader(bytes.substr(kPrefixBytes, *n), bytes.size() - data_start, source_name);
  if (!h.ok()) return h.status();
  const char* data = bytes.data() + data_start;
  return Materialize(std::move(*h), source_name, [&](const Entry& e, char* dst) {
    std::memcpy(dst, data + e.begin, e.end - e.begin);
    return absl::OkStatus();
  });
}

absl::StatusOr<NamedTensors> Parse(absl::string_view bytes, const std::string& source_name) {
  auto c = ParseWithMetadata(bytes, source_name);
  if (!c.ok()) return c.status();
  return std::move(c->tensors);
}

absl::StatusOr<Contents> ReadWithMetadata(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open safetensors file ", path));
  FdCloser closer(fd);
  struct stat sb;
  if (::fstat(fd, &sb) != 0) return ErrnoStatus(errno, absl::StrCat("cannot stat safetensors file ", path));
  if (!S_ISREG(sb.st_mode)) return Corrupt(path, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(sb.st_size);
  absl::Status st = CheckTotalSize(size, path);
  if (!st.ok()) return st;
  char prefix[kPrefixBytes];
  st = PreadAll(fd, prefix, kPrefixBytes, 0, path);
  if (!st.ok()) return st;
  auto n = CheckPrefix(prefix, size, path);
  if (!n.ok()) return n.status();
  std::string header(*n, '\0');
  st = PreadAll(fd, header.data(), *n, kPrefixBytes, path);
  if (!st.ok()) return st;
  const uint64_t data_start = kPrefixBytes + *n;
  auto h = ParseHeader(header, size - data_start, path);
  if (!h.ok()) return h.status();
  return Materialize(std::move(*h), path, [&](const Entry& e, char* dst) {
    return PreadAll(fd, dst, e.end - e.begin, data_start + e.begin, path);
  });
}

absl::StatusOr<NamedTensors> Read(const std::string& path) {
  auto c = ReadWithMetadata(path);
  if (!c.ok()) return c.status();
  return std::move(c->tensors);
}

namespace {

// Validates names and builds the padded header (without the length prefix).
absl::StatusOr<std::string> BuildHeader(const NamedTensors& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  json::Json header = json::Json::object();
  if (!metadata.empty()) {
    json::Json md = json::Json::object();
    for (const auto& [k, v] : metadata) md[k] = v;
    header[kMetadataKey] = std::move(md);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == kMetadataKey) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot save a tensor named ", json::Quote(name), " in safetensors: the name must be non-empty "
          "and not \"__metadata__\""));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot save safetensors: duplicate tensor name ", json::Quote(name)));
    }
    if (!t.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot save safetensors: ", TensorRef(name), " is undefined"));
    }
    json::Json shape = json::Json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    json::Json info = json::Json::object();
    info["dtype"] = DTypeTag(t.dtype());
    info["shape"] = std::move(shape);
    info["data_offsets"] = json::Json::array({offset, offset + t.nbytes()});
    header[name] = std::move(info);
    offset += t.nbytes();
  }
  std::string text = json::Serialize(header);
  // Pad with spaces so the data section starts 8-byte aligned (8 + N = 0 mod 8),
  // as the reference writer does; readers can then map the data in place.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// Appends or writes each tensor's bytes, copying CUDA tensors to the host.
template <typename Sink>
absl::Status ForEachTensorBytes(const NamedTensors& tensors, Sink sink) {
  for (const auto& [name, t] : tensors) {
    if (t.nbytes() == 0) continue;
    absl::Status st;
    absl::Status thrown = RunCatching(
        absl::StrCat("cannot copy ", TensorRef(name), " (", t.DebugString(), ") to the host for saving"), [&] {
          // Row-major bytes on the host (a copy for CUDA tensors and strided views).
          const Tensor host = t.To(Device::CPU()).Contiguous();
          st = sink(static_cast<const char*>(host.raw_data()), host.nbytes());
        });
    if (!thrown.ok()) return thrown;
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

std::string LengthPrefix(uint64_t n) {
  char buf[8];
  std::memcpy(buf, &n, sizeof(n));  // little-endian host
  return std::string(buf, sizeof(buf));
}

}  // namespace

absl::StatusOr<std::string> Serialize(const NamedTensors& tensors,
                                                 const std::map<std::string, std::string>& metadata) {
  auto header = BuildHeader(tensors, metadata);
  if (!header.ok()) return header.status();
  std::string out = LengthPrefix(header->size());
  out += *header;
  absl::Status st = ForEachTensorBytes(tensors, [&](const char* p, size_t n) {
    out.append(p, n);
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return out;
}

absl::Status Write(const std::string& path, const NamedTensors& tensors,
                   const std::map<std::string, std::string>& metadata,
                   const std::function<absl::Status()>& before_rename) {
  auto header = BuildHeader(tensors, metadata);
  if (!header.ok()) return header.status();

  // Atomic (common/atomic_file.h): a reader sees the old checkpoint or the
  // complete new one, and the new one survives a crash once this returns.
  AtomicFileWriter out;
  PSYNC_RETURN_IF_ERROR(out.Open(path));
  PSYNC_RETURN_IF_ERROR(out.Append(LengthPrefix(header->size())));
  PSYNC_RETURN_IF_ERROR(out.Append(*header));
  PSYNC_RETURN_IF_ERROR(
      ForEachTensorBytes(tensors, [&](const char* p, size_t n) { return out.Append(absl::string_view(p, n)); }));
  return out.Commit(before_rename);
}

}  // namespace psync::safetensors
