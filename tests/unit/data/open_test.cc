// data::Open, the registry and --data-format=auto (data/registry.h,
// data/format_detect.h).
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>

#include "tests/common/temp_dir.h"
#include "tests/unit/data/data_test_util.h"
#include "worker/data/fashion_mnist.h"
#include "worker/data/format_detect.h"
#include "worker/data/registry.h"
#include "worker/safetensors/safetensors.h"

namespace psync::data {
namespace {

using namespace testing;  // NOLINT
using test_support::TempDir;

TEST(Datasets, RegistryListsEveryFormat) {
  EXPECT_EQ(Datasets().Names(), (std::vector<std::string>{"rows", "synthetic", "idx", "tokens", "bytes"}));
  DataOptions o;
  o.format = "csv";
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument,
              {"--data-format=csv is not known", "auto, rows, synthetic, idx, tokens, bytes"});
}

TEST(DetectFormat, FromNameAndFirstBytes) {
  TempDir dir("psync_data_detect");
  EXPECT_EQ(*DetectFormat(""), "synthetic");
  EXPECT_EQ(*DetectFormat("fashion-mnist"), "idx");
  EXPECT_EQ(*DetectFormat("fashion-mnist:/somewhere"), "idx");
  EXPECT_EQ(*DetectFormat("a,b"), "idx");
  EXPECT_EQ(*DetectFormat("/no/such/file.safetensors"), "rows");  // by name; Open then names the missing file

  const std::string st = dir.File("table.bin");  // safetensors without the extension
  ASSERT_TRUE(safetensors::Write(st, {{"x", Tensor::FromVector(std::vector<float>{1}, {1, 1})}}).ok());
  EXPECT_EQ(*DetectFormat(st), "rows");

  const std::string llmc = dir.File("shard.bin");
  Reference({"llmc", llmc, "20", "1"});
  EXPECT_EQ(*DetectFormat(llmc), "tokens");

  Reference({"idx", dir.File("i"), "2", "2", "2", "10", "1", "gz"});
  EXPECT_EQ(*DetectFormat(dir.File("i-images-idx3-ubyte.gz")), "idx");
  EXPECT_EQ(*DetectFormat(dir.File("i-labels-idx1-ubyte.gz")), "idx");

  const std::string text = dir.File("book.txt");
  WriteBytes(text, "It was the best of times, it was the worst of times");
  ExpectError(DetectFormat(text).status(), absl::StatusCode::kInvalidArgument,
              {"--data " + text, "format not recognised", "--data-format=bytes"});
  const std::string gz = dir.File("book.txt.gz");
  gzFile f = gzopen(gz.c_str(), "wb");
  gzputs(f, "some text");
  gzclose(f);
  ExpectError(DetectFormat(gz).status(), absl::StatusCode::kInvalidArgument,
              {"gzip-compressed, but not IDX inside", "after gunzip"});
  ExpectError(DetectFormat(dir.File("nope")).status(), absl::StatusCode::kNotFound,
              {"--data " + dir.File("nope"), "no such file"});
  // A directory is a set of llm.c shards (token_stream.h): its sorted *.bin
  // files, the first of which must be one (shard.bin sorts before table.bin).
  EXPECT_EQ(*DetectFormat(dir.path(), "--val-data"), "tokens");
  const std::string empty = dir.File("empty");
  std::filesystem::create_directories(empty);
  ExpectError(DetectFormat(empty, "--val-data").status(), absl::StatusCode::kNotFound,
              {"--val-data " + empty, "no shard files (*.bin) in the directory"});
  const std::string rows_dir = dir.File("rows");
  std::filesystem::create_directories(rows_dir);
  ASSERT_TRUE(safetensors::Write(rows_dir + "/a.bin", {{"x", Tensor::FromVector(std::vector<float>{1}, {1, 1})}}).ok());
  ExpectError(DetectFormat(rows_dir, "--val-data").status(), absl::StatusCode::kInvalidArgument,
              {"--val-data " + rows_dir, "its first shard " + rows_dir + "/a.bin is not an llm.c token file"});
}

TEST(Open, ValDataAndValFractionAreExclusiveAndChecked) {
  TempDir dir("psync_data_open");
  const std::string train = dir.File("train.bin"), val = dir.File("val.bin");
  Reference({"llmc", train, "200", "1"});
  Reference({"llmc", val, "50", "2"});
  DataOptions o;
  o.path = train;
  o.block_size = 8;
  o.val_path = val;
  absl::StatusOr<OpenedData> d = Open(o);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_NE(d->val, nullptr);
  EXPECT_EQ(d->val->num_examples(), 49 / 8);
  EXPECT_NE(d->val->Describe().find(val), std::string::npos);

  o.val_fraction = 0.1;
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument,
              {"--val-data=" + val, "--val-fraction=0.1", "pass one"});
  o.val_fraction = -0.5;
  o.val_path.clear();
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument, {"--val-fraction is -0.5"});

  // A held-out file too short for T names --val-data.
  o.val_fraction = 0;
  o.val_path = val;
  o.block_size = 60;
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument,
              {"--val-data " + val, "token count (header int32 2) is 50", "T = 60"});

  // A held-out set of another kind.
  const std::string rows = dir.File("rows.safetensors");
  ASSERT_TRUE(safetensors::Write(rows, {{"x", Tensor::FromVector(std::vector<float>{1, 2}, {1, 2})},
                                      {"y", Tensor::FromVector(std::vector<float>{3}, {1, 1})}})
                  .ok());
  o.block_size = 8;
  o.val_path = rows;
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument,
              {"--val-data " + rows, "regression examples", "expected language-model examples of shape [8]"});
}

// Held-out token ids are checked against the model's V before training,
// like --data's: with --vocab-size, and without it (V = --data's largest + 1).
TEST(Open, HeldOutTokenIdsMustFitTheVocabulary) {
  TempDir dir("psync_data_open_ids");
  auto llmc = [](const std::string& path, std::vector<uint16_t> toks) {
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520;
    header[1] = 1;
    header[2] = static_cast<int32_t>(toks.size());
    std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
    bytes.append(reinterpret_cast<const char*>(toks.data()), toks.size() * 2);
    WriteBytes(path, bytes);
  };
  std::vector<uint16_t> train(200), val(50);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<uint16_t>((i * 7) % 64);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<uint16_t>((i * 5) % 64);
  llmc(dir.File("train.bin"), train);
  llmc(dir.File("val.bin"), val);
  DataOptions o;
  o.path = dir.File("train.bin");
  o.val_path = dir.File("val.bin");
  o.block_size = 8;
  o.vocab_size = 64;
  ASSERT_TRUE(Open(o).ok()) << "ids below V";
  val[20] = 200;
  llmc(dir.File("val.bin"), val);
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument,
              {"--val-data " + o.val_path + " holds token id 200",
               "outside the model's vocabulary of V=64 (--vocab-size)", "--vocab-size=201"});
  o.vocab_size = 0;
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument,
              {"holds token id 200, outside the model's vocabulary of V=64 (without --vocab-size"});
  o.vocab_size = 256;
  EXPECT_TRUE(Open(o).ok()) << "a larger V takes it";
}

TEST(Open, RowsHeldOutSetMustHaveTheSameWidths) {
  TempDir dir("psync_data_open_rows");
  const std::string a = dir.File("a.safetensors"), b = dir.File("b.safetensors");
  ASSERT_TRUE(safetensors::Write(a, {{"x", Tensor::FromVector(std::vector<float>{1, 2}, {1, 2})},
                                   {"y", Tensor::FromVector(std::vector<float>{3}, {1, 1})}})
                  .ok());
  ASSERT_TRUE(safetensors::Write(b, {{"x", Tensor::FromVector(std::vector<float>{1, 2}, {1, 2})},
                                   {"y", Tensor::FromVector(std::vector<float>{3, 4}, {1, 2})}})
                  .ok());
  DataOptions o;
  o.path = a;
  o.val_path = b;
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument,
              {"--val-data " + b, "with 2 outputs", "with 1 outputs"});
  o.rows_out = 1;  // with the widths known, the file itself is refused
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument, {"--val-data " + b, "tensor 'y'", "[N, 1]"});
}

TEST(Open, FashionMnistNameTakesT10kAsHeldOutUnlessTold) {
  if (!std::filesystem::exists(kFashionMnistDefaultDir)) {
    GTEST_SKIP() << kFashionMnistDefaultDir << " is missing (apt-get install dataset-fashion-mnist)";
  }
  DataOptions o;
  o.path = std::string("fashion-mnist:") + kFashionMnistDefaultDir;
  o.val_fraction = 0.1;
  absl::StatusOr<OpenedData> d = Open(o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train->num_examples(), 54000);
  EXPECT_EQ(d->val->num_examples(), 6000);
  EXPECT_EQ(d->val->Describe(),
            "fashion-mnist train (60000 images 1x28x28, 10 classes) (last 6000 of 60000 images, held out by "
            "--val-fraction=0.1)");
  o.val_fraction = 0;
  o.format = "tokens";
  ExpectError(Open(o).status(), absl::StatusCode::kInvalidArgument, {"is IDX data", "--data-format=tokens"});
  o.format = "auto";
  o.path = "fashion-mnist:/no/such/dir";
  ExpectError(Open(o).status(), absl::StatusCode::kNotFound,
              {"--data /no/such/dir/train-images-idx3-ubyte.gz", "no such file"});
}

}  // namespace
}  // namespace psync::data
