// --data-format=idx (data/idx_file.h, data/idx_dataset.h): values against
// Python's reading of the same gzip/plain files, every corrupt-file case
// with its message, and Debian's Fashion-MNIST files.
#include "worker/data/idx_dataset.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "tests/common/temp_dir.h"
#include "tests/unit/data/data_test_util.h"
#include "worker/data/fashion_mnist.h"
#include "worker/data/idx_file.h"
#include "worker/data/registry.h"

namespace psync::data {
namespace {

using namespace testing;  // NOLINT
using test_support::TempDir;

std::string BigEndian32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims, const std::string& payload) {
  std::string out = BigEndian32(magic);
  for (uint32_t d : dims) out += BigEndian32(d);
  return out + payload;
}

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Parses reference.py idx-expect output: per image "label | pixels".
struct Expected {
  std::vector<int64_t> labels;
  std::vector<float> pixels;
};
Expected ParseExpected(const std::string& text) {
  Expected e;
  for (const std::string& line : Lines(text)) {
    std::vector<std::string> parts = absl::StrSplit(line, '|');
    e.labels.push_back(std::stoll(parts[0]));
    for (float v : Numbers<float>(parts[1])) e.pixels.push_back(v);
  }
  return e;
}

class IdxFiles : public ::testing::Test {
 protected:
  // A valid pair written by Python: PREFIX-{images-idx3,labels-idx1}-ubyte[.gz].
  std::string WritePair(const std::string& name, int n, int h, int w, int classes, const std::string& mode) {
    Reference({"idx", dir_.File(name), std::to_string(n), std::to_string(h), std::to_string(w), std::to_string(classes),
               "3", mode});
    return dir_.File(name) + "-images-idx3-ubyte" + (mode == "gz" ? ".gz" : "");
  }
  std::string Labels(const std::string& images) {
    std::string l = images;
    l.replace(l.find("images-idx3"), 11, "labels-idx1");
    return l;
  }
  // Opening --data=`path` fails with InvalidArgument naming `file` and every needle.
  void ExpectOpenError(const std::string& path, const std::string& file, const std::vector<std::string>& needles,
                       int64_t h = 0, int64_t w = 0) {
    DataOptions o;
    o.path = path;
    o.format = "idx";
    o.image_height = h;
    o.image_width = w;
    absl::StatusOr<OpenedData> d = Open(o);
    std::vector<std::string> all = {"--data " + file};
    all.insert(all.end(), needles.begin(), needles.end());
    ExpectError(d.status(), absl::StatusCode::kInvalidArgument, all);
  }
  // A copy of the plain pair `images` under a new name with its images or labels file replaced by `bytes`.
  std::string Corrupt(const std::string& images, const std::string& name, bool labels_file, const std::string& bytes) {
    const std::string ci = dir_.File(name + "-images-idx3-ubyte");
    const std::string cl = dir_.File(name + "-labels-idx1-ubyte");
    WriteBytes(ci, labels_file ? ReadBytes(images) : bytes);
    WriteBytes(cl, labels_file ? bytes : ReadBytes(Labels(images)));
    return ci;
  }

  TempDir dir_{"psync_data_idx"};
};

TEST_F(IdxFiles, GzipAndPlainMatchPythonReading) {
  for (const std::string mode : {"gz", "plain"}) {
    const std::string images = WritePair("small_" + mode, 6, 5, 4, 10, mode);
    Expected want = ParseExpected(Reference({"idx-expect", images, Labels(images), "0.2860", "0.3530"}));
    ASSERT_EQ(want.labels.size(), 6u);
    DataOptions o;
    o.path = images;  // auto: IDX magic (inside the gzip stream for .gz)
    absl::StatusOr<OpenedData> d = Open(o);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->format, "idx");
    EXPECT_EQ(d->val, nullptr);
    const Dataset& ds = *d->train;
    EXPECT_EQ(ds.num_examples(), 6);
    EXPECT_EQ(ds.info().task, Task::kClassification);
    EXPECT_EQ(ds.info().example_shape, (Shape{1, 5, 4}));
    EXPECT_EQ(ds.info().num_outputs, 10);
    absl::StatusOr<Batch> b = ds.Examples(0, 6);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->inputs.shape(), (Shape{6, 1, 5, 4}));
    EXPECT_EQ(b->inputs.dtype(), kFloat32);
    EXPECT_EQ(b->targets.shape(), (Shape{6}));
    EXPECT_EQ(b->targets.dtype(), kInt64);
    EXPECT_EQ(b->inputs.ToVector(), want.pixels) << mode;  // bit-exact float32
    EXPECT_EQ(b->targets.ToVector<int64_t>(), want.labels) << mode;

    // Training batches follow the example order: step 1, B = 4 holds images 4, 5, 0, 1.
    std::vector<float> x;
    std::vector<int64_t> y;
    ConcatRanks(ds, 1, 2, 2, 4, &x, &y);
    EXPECT_EQ(y, (std::vector<int64_t>{want.labels[4], want.labels[5], want.labels[0], want.labels[1]}));
    EXPECT_EQ(std::vector<float>(x.begin(), x.begin() + 20),
              std::vector<float>(want.pixels.begin() + 80, want.pixels.begin() + 100));
  }
}

TEST_F(IdxFiles, ExplicitPairAndLabelsFileFindTheirPartner) {
  const std::string images = WritePair("pair", 3, 2, 2, 10, "plain");
  for (const std::string& path : {images + "," + Labels(images), Labels(images)}) {
    DataOptions o;
    o.path = path;
    absl::StatusOr<OpenedData> d = Open(o);
    ASSERT_TRUE(d.ok()) << path << ": " << d.status();
    EXPECT_EQ(d->train->num_examples(), 3);
  }
  ExpectError(IdxPaths(dir_.File("stuff.idx"), "--data").status(), absl::StatusCode::kInvalidArgument,
              {"IMAGES,LABELS", "images-idx3", "labels-idx1"});
}

TEST_F(IdxFiles, ShuffledImagesAreEqualAcrossRanks) {
  const std::string images = WritePair("shuf", 10, 2, 2, 10, "gz");
  DataOptions o;
  o.path = images;
  o.shuffle = true;
  o.seed = 4;
  absl::StatusOr<OpenedData> d = Open(o);
  ASSERT_TRUE(d.ok()) << d.status();
  for (int64_t step = 0; step < 4; ++step) {
    std::vector<float> x1, x;
    std::vector<int64_t> y1, y;
    ConcatRanks(*d->train, step, 1, 1, 4, &x1, &y1);
    ConcatRanks(*d->train, step, 4, 1, 4, &x, &y);
    EXPECT_EQ(x, x1);
    EXPECT_EQ(y, y1);
    std::vector<float> x2;
    std::vector<int64_t> y2;
    ConcatRanks(*d->train, step, 2, 2, 4, &x2, &y2);
    EXPECT_EQ(x2, x1);
  }
}

// Every corrupt-file case fails before training, naming the file, the field
// and the expected value.
TEST_F(IdxFiles, CorruptFilesNameFileFieldAndExpectedValue) {
  const std::string images = WritePair("ok", 4, 3, 3, 10, "plain");
  const std::string img = ReadBytes(images), lab = ReadBytes(Labels(images));
  const std::string pixels = img.substr(16), labels = lab.substr(8);

  std::string p = Corrupt(images, "badmagic", false, "\x01\x02" + img.substr(2));
  ExpectOpenError(p, p, {"magic number is 0x01020803", "expected 0x00000803", "first two bytes are not zero"});
  p = Corrupt(images, "float", false, IdxBytes(0x0D03, {4, 3, 3}, pixels));
  ExpectOpenError(p, p, {"magic number is 0x00000D03", "element type 0x0D (float32), expected 0x08 (unsigned byte)"});
  p = Corrupt(images, "dims", false, IdxBytes(0x0804, {4, 3, 3, 1}, pixels));
  ExpectOpenError(p, p, {"magic number is 0x00000804", "dimension count 4, expected 3 (images)"});
  p = Corrupt(images, "labdims", true, IdxBytes(0x0803, {4, 1, 1}, labels));
  ExpectOpenError(p, Labels(p),
                  {"magic number is 0x00000803, expected 0x00000801", "dimension count 3, expected 1 (labels)"});
  // image count != label count
  p = Corrupt(images, "count", true, IdxBytes(0x0801, {3}, labels.substr(0, 3)));
  ExpectOpenError(p, Labels(p), {"dimension 0 (label count) is 3, expected 4", "the image count of " + p});
  // label out of range (classes = 10)
  p = Corrupt(images, "label", true, IdxBytes(0x0801, {4}, std::string("\x01\x02\x0A\x03", 4)));
  ExpectOpenError(p, Labels(p), {"label 2 is 10, expected 0..9 (10 classes)"});
  // image size mismatch against the expected 28 x 28
  ExpectOpenError(images, images, {"dimension 1 (rows) is 3, expected 28"}, 28, 28);
  ExpectOpenError(images, images, {"dimension 2 (cols) is 3, expected 4"}, 3, 4);
  // zero images
  p = Corrupt(images, "zero", false, IdxBytes(0x0803, {0, 3, 3}, ""));
  ExpectOpenError(p, p, {"dimension 0 (image count) is 0, expected at least 1"});
  // truncated payload, truncated header, trailing bytes
  p = Corrupt(images, "trunc", false, img.substr(0, img.size() - 5));
  ExpectOpenError(p, p,
                  {"truncated", "4 x 3 x 3 = 36 bytes of images", "the file holds 31 of them", "expected 52 bytes"});
  p = Corrupt(images, "trunchead", false, img.substr(0, 10));
  ExpectOpenError(p, p, {"truncated", "inside the dimension 1 (rows)"});
  p = Corrupt(images, "trailing", false, img + "xyz");
  ExpectOpenError(p, p, {"3 trailing bytes", "expected the file to end at byte 52"});
  p = Corrupt(images, "labtrailing", true, lab + "x");
  ExpectOpenError(p, Labels(p), {"1 trailing bytes", "expected the file to end at byte 12"});
}

TEST_F(IdxFiles, CorruptGzipStreams) {
  const std::string images = WritePair("gzok", 4, 3, 3, 10, "plain");
  const std::string img = ReadBytes(images);
  WriteGzip(dir_.File("full.gz"), img);
  const std::string gz = ReadBytes(dir_.File("full.gz"));
  WriteBytes(Labels(dir_.File("cut-images-idx3-ubyte.gz")), "");  // never reached: images fail first
  // Cut the compressed stream: zlib reports the early end.
  const std::string cut = dir_.File("cut-images-idx3-ubyte.gz");
  WriteBytes(cut, gz.substr(0, gz.size() - 12));
  ExpectOpenError(cut, cut, {"truncated gzip stream", "uncompressed bytes"});
  // Flip a byte of the CRC trailer: the stream inflates but fails its check.
  std::string bad = gz;
  bad[bad.size() - 6] ^= 0x55;
  const std::string crc = dir_.File("crc-images-idx3-ubyte.gz");
  WriteBytes(crc, bad);
  ExpectOpenError(crc, crc, {"corrupt gzip stream", "incorrect data check"});
  // Trailing bytes inside the gzip stream.
  const std::string trail = dir_.File("trail-images-idx3-ubyte.gz");
  WriteGzip(trail, img + "ab");
  ExpectOpenError(trail, trail, {"2 trailing bytes", "end at byte 52 uncompressed"});
}

TEST_F(IdxFiles, HeldOutSetMustHaveTheSameImageSize) {
  const std::string a = WritePair("a", 4, 3, 3, 10, "gz");
  const std::string b = WritePair("b", 4, 4, 3, 10, "gz");
  DataOptions o;
  o.path = a;
  o.val_path = b;
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument,
              {"--val-data " + b, "shape [1, 4, 3]", "expected classification examples of shape [1, 3, 3]"});
}

// Debian's dataset-fashion-mnist package, against Python's own reading of the files.
TEST(FashionMnist, DebianFilesMatchPythonReading) {
  if (!std::filesystem::exists(kFashionMnistDefaultDir)) {
    GTEST_SKIP() << kFashionMnistDefaultDir << " is missing (apt-get install dataset-fashion-mnist)";
  }
  std::vector<std::string> ref = Lines(Reference({"fmnist", kFashionMnistDefaultDir}));
  ASSERT_EQ(ref.size(), 2u);
  const auto t0 = std::chrono::steady_clock::now();
  DataOptions o;
  o.path = "fashion-mnist";
  absl::StatusOr<OpenedData> d = Open(o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(d.ok()) << d.status();
  std::printf("fashion-mnist train + t10k opened (gzip decode + validation) in %.3f s\n", seconds);
  ASSERT_NE(d->val, nullptr);
  EXPECT_EQ(d->train->Describe(), "fashion-mnist train (60000 images 1x28x28, 10 classes)");
  EXPECT_EQ(d->val->Describe(), "fashion-mnist t10k (10000 images 1x28x28, 10 classes)");
  const Dataset* parts[2] = {d->train.get(), d->val.get()};
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> f = absl::StrSplit(ref[i], '|');
    std::vector<int64_t> head = Numbers<int64_t>(f[0].substr(f[0].find(' ')));
    std::vector<int64_t> first_labels = Numbers<int64_t>(f[1]);
    std::vector<int64_t> hist = Numbers<int64_t>(f[2]);
    std::vector<int64_t> sums = Numbers<int64_t>(f[3]);
    const Dataset& ds = *parts[i];
    EXPECT_EQ(ds.num_examples(), head[0]);
    EXPECT_EQ(ds.info().example_shape, (Shape{1, head[1], head[2]}));
    absl::StatusOr<Batch> all = ds.Examples(0, ds.num_examples());
    ASSERT_TRUE(all.ok()) << all.status();
    std::vector<int64_t> labels = all->targets.ToVector<int64_t>();
    EXPECT_EQ(std::vector<int64_t>(labels.begin(), labels.begin() + 20), first_labels);
    std::vector<int64_t> got_hist(10);
    for (int64_t l : labels) ++got_hist[l];
    EXPECT_EQ(got_hist, hist);
    // Undo the normalisation to count pixel bytes, and check the constants
    // normalise the training set to mean ~0, std ~1.
    std::vector<float> x = all->inputs.ToVector();
    double first = 0, total = 0, sum = 0, sq = 0;
    for (size_t p = 0; p < x.size(); ++p) {
      const double byte = std::round((x[p] * kFashionMnistStd + kFashionMnistMean) * 255.0);
      total += byte;
      if (p < 784) first += byte;
      sum += x[p];
      sq += double{x[p]} * x[p];
    }
    EXPECT_EQ(static_cast<int64_t>(first), sums[0]);
    EXPECT_EQ(static_cast<int64_t>(total), sums[1]);
    if (i == 0) {
      const double mean = sum / x.size(), var = sq / x.size() - mean * mean;
      EXPECT_NEAR(mean, 0.0, 2e-4);
      EXPECT_NEAR(std::sqrt(var), 1.0, 2e-4);
    }
  }
}

}  // namespace
}  // namespace psync::data
