#include "worker/safetensors/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"

namespace psync {
namespace {

namespace fs = std::filesystem;

using test_support::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// Little-endian float32 bytes, built byte by byte as the spec describes
// (independent of how the implementation copies memory).
std::string F32Bytes(const std::vector<float>& values) {
  std::string s;
  for (float f : values) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  }
  return s;
}

// A file: length prefix + header (unpadded unless the caller pads) + data.
std::string Craft(const std::string& header, const std::string& data) {
  return Le64(header.size()) + header + data;
}

std::vector<float> Iota(size_t n, float start = 0.5f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i) * 0.25f;
  return v;
}

NamedTensors SampleTensors() {
  return {
      {"0.weight", Tensor::FromVector(Iota(12), {4, 3})},
      {"0.bias", Tensor::FromVector(Iota(4, -1.0f), {4})},
      {"scalar", Tensor::Scalar(3.5f)},
      {"empty", Tensor::Zeros({0, 5})},
      {"2.weight", Tensor::FromVector(Iota(8, 10.0f), {2, 4})},
  };
}

void ExpectSameTensors(const NamedTensors& got, const NamedTensors& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.shape(), want[i].second.shape()) << got[i].first;
    EXPECT_TRUE(got[i].second.device().is_cpu());
    EXPECT_EQ(got[i].second.ToVector(), want[i].second.ToVector()) << got[i].first;
  }
}

// ---------------------------------------------------------------- round trip

TEST(Safetensors, RoundTripFile) {
  TempDir dir;
  const std::string path = dir.File("model.safetensors");
  NamedTensors in = SampleTensors();
  std::map<std::string, std::string> md = {{"format", "pt"}, {"step", "100"}};
  ASSERT_TRUE(safetensors::Write(path, in, md).ok());

  auto out = safetensors::ReadWithMetadata(path);
  ASSERT_TRUE(out.ok()) << out.status();
  // Zero-size tensors sit at the offset where they were written, so the
  // data-offset order is the write order here.
  ExpectSameTensors(out->tensors, in);
  EXPECT_EQ(out->metadata, md);

  // Layout: header padded so the data starts 8-byte aligned.
  std::string bytes = ReadFile(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + (12 + 4 + 1 + 0 + 8) * 4);
  EXPECT_EQ(bytes[8], '{');
  EXPECT_NE(bytes.find("\"__metadata__\":{\"format\":\"pt\",\"step\":\"100\"}"), std::string::npos);

  // No temporary file left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(e.path().filename(), "model.safetensors");
  }
  EXPECT_EQ(files, 1);
}

TEST(Safetensors, SerializeMatchesFileAndParses) {
  TempDir dir;
  const std::string path = dir.File("a.safetensors");
  NamedTensors in = SampleTensors();
  ASSERT_TRUE(safetensors::Write(path, in).ok());
  auto bytes = safetensors::Serialize(in);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, ReadFile(path));
  auto parsed = safetensors::Parse(*bytes, "mem");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameTensors(*parsed, in);
  // Without metadata there is no __metadata__ entry.
  EXPECT_EQ(bytes->find("__metadata__"), std::string::npos);
}

TEST(Safetensors, OverwriteIsAtomicReplace) {
  TempDir dir;
  const std::string path = dir.File("ckpt.safetensors");
  ASSERT_TRUE(safetensors::Write(path, SampleTensors()).ok());
  NamedTensors second = {{"w", Tensor::Full({3}, 7.0f)}};
  ASSERT_TRUE(safetensors::Write(path, second).ok());
  auto out = safetensors::Read(path);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectSameTensors(*out, second);
  struct stat sb;
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0644u);
}

TEST(Safetensors, RoundTripFromCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << CheckDeviceAvailable(Device::CUDA()).message();
  TempDir dir;
  const std::string path = dir.File("cuda.safetensors");
  NamedTensors cpu = SampleTensors();
  NamedTensors gpu;
  for (const auto& [n, t] : cpu) gpu.emplace_back(n, t.To(Device::CUDA()));
  ASSERT_TRUE(safetensors::Write(path, gpu).ok());
  auto out = safetensors::Read(path);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectSameTensors(*out, cpu);
}

// ---------------------------------------------------------------- hand-crafted files

TEST(Safetensors, HandCraftedBytesPerSpec) {
  // Written exactly as the format description says, not by our writer:
  // unpadded header, keys out of data order, extra whitespace, metadata last.
  const std::string header =
      "{ \"b\" : {\"dtype\":\"F32\", \"shape\":[2], \"data_offsets\":[0,8]},\n"
      "  \"a\": {\"shape\":[1,1],\"dtype\":\"F32\",\"data_offsets\":[8,12]},"
      "  \"__metadata__\": {\"k\": \"v\"}}";
  const std::string file = Craft(header, F32Bytes({1.5f, -2.0f, 1e-3f}));
  auto out = safetensors::ParseWithMetadata(file, "hand");
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->tensors.size(), 2u);
  EXPECT_EQ(out->tensors[0].first, "b");
  EXPECT_EQ(out->tensors[0].second.shape(), (Shape{2}));
  EXPECT_EQ(out->tensors[0].second.ToVector(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(out->tensors[1].first, "a");
  EXPECT_EQ(out->tensors[1].second.shape(), (Shape{1, 1}));
  EXPECT_EQ(out->tensors[1].second.ToVector(), (std::vector<float>{1e-3f}));
  EXPECT_EQ(out->metadata.at("k"), "v");

  // Same with the header space-padded to 8-byte alignment.
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  EXPECT_TRUE(safetensors::Parse(Craft(padded, F32Bytes({1.5f, -2.0f, 1e-3f})), "hand").ok());

  // Empty file: "{}" and no data.
  auto empty = safetensors::Parse(Craft("{}", ""), "empty");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

// ---------------------------------------------------------------- corruption

struct BadCase {
  const char* label;
  std::string bytes;
  std::string needle;  // must appear in the error message
};

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

std::vector<BadCase> BadCases() {
  const std::string d8 = F32Bytes({1, 2});
  const std::string d16 = F32Bytes({1, 2, 3, 4});
  std::vector<BadCase> c;
  c.push_back({"too short", "abc", "file is 3 bytes, too short"});
  c.push_back({"empty file", "", "file is 0 bytes, too short"});
  c.push_back({"header longer than file", Le64(1000) + "{}", "header length 1000 is larger than the 2 bytes"});
  c.push_back({"header over 100 MB", Le64(200'000'000) + "{}", "header length 200000000 is over the 100000000-byte limit"});
  c.push_back({"header length huge", Le64(~0ull) + "{}", "over the 100000000-byte limit"});
  c.push_back({"invalid json", Craft("{\"w\":", ""), "invalid JSON header"});
  c.push_back({"not utf8 json", Craft("{\"\xff\":1}", ""), "invalid JSON header"});
  c.push_back({"trailing garbage", Craft("{} x", ""), "trailing data"});
  c.push_back({"header not object", Craft("[1, 2]", ""), "header is a JSON array, expected an object"});
  c.push_back({"entry not object", Craft("{\"w\": 5}", ""), "tensor \"w\": header entry is a JSON number"});
  c.push_back({"dtype U8", Craft("{" + Entry("w", "U8", "[4]", "[0,4]") + "}", F32Bytes({0})),
               "tensor \"w\" has dtype U8; supported dtypes are F32, F64, BF16, F16 and I64"});
  c.push_back({"dtype F16 size", Craft("{" + Entry("layer.w", "F16", "[1]", "[0,4]") + "}", F32Bytes({0})),
               "tensor \"layer.w\": shape [1] with dtype F16 needs 2 bytes but data_offsets [0, 4] span 4 bytes"});
  c.push_back({"dtype not string", Craft("{\"w\":{\"dtype\":1,\"shape\":[],\"data_offsets\":[0,4]}}", F32Bytes({0})),
               "tensor \"w\": dtype is 1, expected a string"});
  c.push_back({"shape not list", Craft("{" + Entry("w", "F32", "3", "[0,12]") + "}", F32Bytes({1, 2, 3})),
               "tensor \"w\": shape is 3, expected a list of non-negative integers"});
  c.push_back({"shape negative", Craft("{" + Entry("w", "F32", "[-2]", "[0,8]") + "}", d8),
               "tensor \"w\": shape[0] is -2, not a non-negative integer"});
  c.push_back({"shape float", Craft("{" + Entry("w", "F32", "[1,2.5]", "[0,8]") + "}", d8),
               "tensor \"w\": shape[1] is 2.5, not a non-negative integer"});
  c.push_back({"shape string", Craft("{" + Entry("w", "F32", "[\"2\"]", "[0,8]") + "}", d8),
               "tensor \"w\": shape[0] is \"2\", not a non-negative integer"});
  c.push_back({"shape overflow",
               Craft("{" + Entry("w", "F32", "[4611686018427387904,4611686018427387904]", "[0,8]") + "}", d8),
               "tensor \"w\": shape [4611686018427387904, 4611686018427387904] has more elements"});
  c.push_back({"shape vs bytes", Craft("{" + Entry("w", "F32", "[3]", "[0,16]") + "}", d16),
               "tensor \"w\": shape [3] with dtype F32 needs 12 bytes but data_offsets [0, 16] span 16 bytes"});
  c.push_back({"offsets out of range", Craft("{" + Entry("w", "F32", "[4]", "[0,16]") + "}", d8),
               "tensor \"w\": data_offsets [0, 16] run past the end of the data section (8 bytes)"});
  c.push_back({"offsets reversed", Craft("{" + Entry("w", "F32", "[0]", "[8,0]") + "}", d8),
               "tensor \"w\": data_offsets [8, 0] end before they begin"});
  c.push_back({"offsets arity", Craft("{" + Entry("w", "F32", "[2]", "[0]") + "}", d8),
               "tensor \"w\": data_offsets is [0], expected [begin, end]"});
  c.push_back({"offsets negative", Craft("{" + Entry("w", "F32", "[2]", "[-8,0]") + "}", d8),
               "tensor \"w\": data_offsets[0] is -8"});
  c.push_back({"overlap",
               Craft("{" + Entry("a", "F32", "[2]", "[0,8]") + "," + Entry("b", "F32", "[2]", "[4,12]") + "}",
                     F32Bytes({1, 2, 3})),
               "tensor \"b\" (bytes [4, 12]) overlaps tensor \"a\" (bytes [0, 8])"});
  c.push_back({"same range twice",
               Craft("{" + Entry("a", "F32", "[2]", "[0,8]") + "," + Entry("b", "F32", "[2]", "[0,8]") + "}", d8),
               "overlaps"});
  c.push_back({"gap",
               Craft("{" + Entry("a", "F32", "[1]", "[0,4]") + "," + Entry("b", "F32", "[1]", "[8,12]") + "}",
                     F32Bytes({1, 2, 3})),
               "gap in the data section: bytes [4, 8] before tensor \"b\""});
  c.push_back({"gap at start", Craft("{" + Entry("a", "F32", "[1]", "[4,8]") + "}", d8),
               "gap in the data section: bytes [0, 4] before tensor \"a\""});
  c.push_back({"trailing bytes", Craft("{" + Entry("a", "F32", "[1]", "[0,4]") + "}", d8),
               "data section is 8 bytes but the tensors cover only the first 4"});
  c.push_back({"data without tensors", Craft("{}", d8), "data section is 8 bytes but the tensors cover only the first 0"});
  c.push_back({"duplicate names",
               Craft("{" + Entry("w", "F32", "[1]", "[0,4]") + "," + Entry("w", "F32", "[1]", "[4,8]") + "}", d8),
               "duplicate object key \"w\""});
  c.push_back({"empty name", Craft("{" + Entry("", "F32", "[1]", "[0,4]") + "}", F32Bytes({1})),
               "a tensor has an empty name"});
  c.push_back({"missing field", Craft("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", F32Bytes({1})),
               "tensor \"w\": missing field \"data_offsets\""});
  c.push_back({"unknown field",
               Craft("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", F32Bytes({1})),
               "tensor \"w\": unknown field \"x\""});
  c.push_back({"metadata not object", Craft("{\"__metadata__\": [1]}", ""), "__metadata__ is a JSON array"});
  c.push_back({"metadata value not string", Craft("{\"__metadata__\": {\"step\": 5}}", ""),
               "__metadata__ value for \"step\" is 5, expected a string"});
  c.push_back({"header too small", Le64(1) + "{", "header length 1 is too small"});
  c.push_back({"deep nesting", Craft("{\"__metadata__\":" + std::string(100, '[') + std::string(100, ']') + "}", ""),
               "nesting deeper than the limit"});
  return c;
}

TEST(Safetensors, CorruptFilesNameFileAndProblem) {
  TempDir dir;
  int i = 0;
  for (const BadCase& bc : BadCases()) {
    SCOPED_TRACE(bc.label);
    const std::string path = dir.File("bad" + std::to_string(i++) + ".safetensors");
    WriteFile(path, bc.bytes);
    auto r = safetensors::Read(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    std::string msg(r.status().message());
    EXPECT_NE(msg.find("safetensors file " + path + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(bc.needle), std::string::npos) << "message: " << msg << "\nwant: " << bc.needle;

    // The in-memory parser reports the same problem under the source name.
    auto p = safetensors::Parse(bc.bytes, "src.safetensors");
    ASSERT_FALSE(p.ok());
    std::string pmsg(p.status().message());
    EXPECT_NE(pmsg.find("safetensors file src.safetensors: "), std::string::npos) << pmsg;
    EXPECT_NE(pmsg.find(bc.needle), std::string::npos) << "message: " << pmsg;
  }
}

TEST(Safetensors, MissingFileIsNotFound) {
  auto r = safetensors::Read("/nonexistent/dir/x.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(r.status().message()).find("/nonexistent/dir/x.safetensors"), std::string::npos);
  TempDir dir;
  auto d = safetensors::Read(dir.path());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(std::string(d.status().message()).find("not a regular file"), std::string::npos);
}

TEST(Safetensors, WriteRejectsBadInput) {
  TempDir dir;
  const std::string path = dir.File("w.safetensors");
  auto dup = safetensors::Write(path, {{"w", Tensor::Zeros({1})}, {"w", Tensor::Zeros({1})}});
  EXPECT_NE(std::string(dup.message()).find("duplicate tensor name \"w\""), std::string::npos) << dup;
  auto meta = safetensors::Write(path, {{"__metadata__", Tensor::Zeros({1})}});
  EXPECT_FALSE(meta.ok());
  auto empty_name = safetensors::Write(path, {{"", Tensor::Zeros({1})}});
  EXPECT_FALSE(empty_name.ok());
  auto undef = safetensors::Write(path, {{"u", Tensor()}});
  EXPECT_NE(std::string(undef.message()).find("tensor \"u\" is undefined"), std::string::npos) << undef;
  EXPECT_FALSE(fs::exists(path));
  auto nodir = safetensors::Write(dir.File("no/such/dir/x.safetensors"), {{"w", Tensor::Zeros({1})}});
  ASSERT_FALSE(nodir.ok());
  EXPECT_NE(std::string(nodir.message()).find("no/such/dir/x.safetensors"), std::string::npos) << nodir;
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// ---------------------------------------------------------------- robustness corpus

// Every truncation and many random mutations of a valid file must give
// either a valid result or an error naming the source, never a crash.
TEST(Safetensors, TruncatedAndMutatedCorpusNeverCrashes) {
  auto valid = safetensors::Serialize(SampleTensors(), {{"format", "pt"}});
  ASSERT_TRUE(valid.ok());
  const std::string& good = *valid;

  auto check = [](const std::string& bytes) {
    auto r = safetensors::ParseWithMetadata(bytes, "corpus");
    if (r.ok()) {
      // Accepted files must be self-consistent: the tensors tile the data.
      uint64_t n = 0;
      std::memcpy(&n, bytes.data(), 8);
      uint64_t total = 0;
      for (const auto& [name, t] : r->tensors) total += t.nbytes();
      EXPECT_EQ(total, bytes.size() - 8 - n);
    } else {
      EXPECT_NE(std::string(r.status().message()).find("safetensors file corpus: "), std::string::npos)
          << r.status();
    }
    return r.ok();
  };

  int accepted = 0;
  for (size_t len = 0; len < good.size(); ++len) accepted += check(good.substr(0, len));
  EXPECT_EQ(accepted, 0) << "a truncated file was accepted";
  EXPECT_TRUE(check(good));

  std::mt19937 rng(12345);
  const char interesting[] = {'\0', '"', '{', '}', '[', ']', ',', ':', '-', '9', ' ', '\\', '\x7f', '\xff'};
  for (int iter = 0; iter < 20000; ++iter) {
    std::string m = good;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !m.empty(); ++e) {
      size_t pos = rng() % m.size();
      switch (rng() % 5) {
        case 0: m[pos] = static_cast<char>(rng() & 0xff); break;
        case 1: m[pos] = interesting[rng() % sizeof(interesting)]; break;
        case 2: m.erase(pos, 1 + rng() % 8); break;
        case 3: m.insert(pos, 1, interesting[rng() % sizeof(interesting)]); break;
        case 4: m[pos] = static_cast<char>(m[pos] ^ (1 << (rng() % 8))); break;
      }
    }
    check(m);
  }
}

TEST(Safetensors, TruncatedFilesOnDisk) {
  TempDir dir;
  auto valid = safetensors::Serialize(SampleTensors());
  ASSERT_TRUE(valid.ok());
  for (size_t len : {size_t{0}, size_t{7}, size_t{8}, size_t{20}, valid->size() / 2, valid->size() - 1}) {
    const std::string path = dir.File("t" + std::to_string(len));
    WriteFile(path, valid->substr(0, len));
    auto r = safetensors::Read(path);
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_NE(std::string(r.status().message()).find(path), std::string::npos) << r.status();
  }
}

// ---------------------------------------------------------------- PyTorch interop

// Runs Debian's python3 (which sees python3-torch) with `args`, killed after
// 120 s; returns its exit code (-1 if it could not start or was killed).
int RunPython(std::vector<std::string> args) {
  args.insert(args.begin(), "/usr/bin/python3");
  test_support::SpawnResult r = test_support::SpawnAndCapture(args, std::chrono::seconds(120));
  if (r.code != 0) std::fprintf(stderr, "%s", r.output.c_str());
  return r.code;
}

bool HaveTorch() { return test_support::SpawnAndCapture({"/usr/bin/python3", "-c", "import torch"}).code == 0; }

// PyTorch writes a state_dict in the safetensors byte format (the python
// `safetensors` package is not installed on Debian, so the script lays out
// the bytes itself, as the spec says); psync reads it. Then psync writes and
// PyTorch reads back with the same spec-level parser.
TEST(Safetensors, InteropWithPyTorch) {
  if (!HaveTorch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch (apt-get install python3-torch)";
  TempDir dir;
  const std::string script = dir.File("interop.py");
  WriteFile(script, R"PY(
import json, struct, sys
import torch

def save(path, sd):
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k, v in sd.items():
        b = v.detach().contiguous().float().numpy().tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h); f.write(b"".join(blobs))

def load(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for k, info in header.items():
        assert info["dtype"] == "F32"
        b, e = info["data_offsets"]
        out[k] = torch.frombuffer(bytearray(data[8 + n + b: 8 + n + e]), dtype=torch.float32).reshape(info["shape"])
    return out

mode, path = sys.argv[1], sys.argv[2]
if mode == "save":
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    sd = model.state_dict()
    save(path, sd)
    with open(path + ".json", "w") as f:
        json.dump({k: {"shape": list(v.shape), "values": v.flatten().tolist()} for k, v in sd.items()}, f)
else:
    sd = load(path)
    want = {"w": (torch.arange(6, dtype=torch.float32) * 0.5 - 1).reshape(2, 3), "b": torch.tensor([3.25])}
    assert list(sd.keys()) == ["w", "b"], list(sd.keys())
    for k in want:
        assert torch.equal(sd[k], want[k]), (k, sd[k], want[k])
    print("torch read OK")
)PY");

  // torch -> psync
  const std::string from_torch = dir.File("torch.safetensors");
  ASSERT_EQ(RunPython({script, "save", from_torch}), 0);
  auto got = safetensors::ReadWithMetadata(from_torch);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->metadata.at("format"), "pt");
  ASSERT_EQ(got->tensors.size(), 4u);
  EXPECT_EQ(got->tensors[0].first, "0.weight");
  EXPECT_EQ(got->tensors[0].second.shape(), (Shape{4, 3}));
  EXPECT_EQ(got->tensors[1].first, "0.bias");
  EXPECT_EQ(got->tensors[2].first, "2.weight");
  EXPECT_EQ(got->tensors[2].second.shape(), (Shape{2, 4}));
  EXPECT_EQ(got->tensors[3].first, "2.bias");
  // Values match what torch printed as JSON (floats are exact in JSON as doubles).
  std::string expected = ReadFile(from_torch + ".json");
  for (const auto& [name, t] : got->tensors) {
    std::vector<float> v = t.ToVector();
    size_t at = expected.find("\"" + name + "\"");
    ASSERT_NE(at, std::string::npos) << name;
    size_t vals = expected.find("\"values\": [", at) + 11;
    std::istringstream in(expected.substr(vals, expected.find(']', vals) - vals));
    for (size_t i = 0; i < v.size(); ++i) {
      double d;
      char comma;
      in >> d;
      if (i + 1 < v.size()) in >> comma;
      EXPECT_EQ(v[i], static_cast<float>(d)) << name << "[" << i << "]";
    }
  }

  // psync -> torch
  const std::string from_psync = dir.File("psync.safetensors");
  std::vector<float> w(6);
  for (int i = 0; i < 6; ++i) w[i] = static_cast<float>(i) * 0.5f - 1.0f;
  ASSERT_TRUE(safetensors::Write(from_psync, {{"w", Tensor::FromVector(w, {2, 3})}, {"b", Tensor::FromVector({3.25f}, {1})}},
                               {{"format", "pt"}})
                  .ok());
  EXPECT_EQ(RunPython({script, "load", from_psync}), 0);
}

}  // namespace
}  // namespace psync
