// The tokens a language-model dataset reads (token_dataset.h): one file
// (token_file.h: llm.c or bytes), or a set of llm.c shards read as one
// stream in sorted order (--data=DIR or --data='DIR/*_train_*.bin'), so
// the data contract's sequence mapping runs over their concatenation and a
// sequence may span two shards.
//
// Shards: every header is checked when the set is opened (errors name the
// shard), but a shard's tokens are memory-mapped only when a read first
// touches them. Each shard keeps llm.c's limit of 2^31 - 1 tokens; the
// stream's positions are int64. With a vocabulary limit (--vocab-size),
// every id a read copies is checked against it (a read that meets a larger
// id fails naming the shard and the position), so nothing has to scan the
// shards before training.
//
// Threads: immutable after opening except for the lazy mapping, which a
// mutex per shard guards; Read and MaxId are safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/token_file.h"

namespace psync::data {

// True when `path` names a set of shards: a directory, or a pattern with
// * ? or [ in it.
bool IsShardSet(const std::string& path);

// The shard files of `path` in byte-wise sorted order: a directory's *.bin
// files, or the files a glob pattern matches. InvalidArgument / NotFound
// naming `flag` and `path` when nothing matches, or when a directory holds
// both train and val shards (llm.c's "_train_" and "_val_": pass a glob).
absl::StatusOr<std::vector<std::string>> ListShards(const std::string& path, const std::string& flag);

class TokenStream {
 public:
  // One file, already mapped and validated.
  explicit TokenStream(TokenFile file);
  // llm.c shards in this order: headers checked now, tokens mapped on first
  // read. vocab_limit > 0: ids must be below it (checked as they are read).
  static absl::StatusOr<TokenStream> OpenShards(const std::vector<std::string>& paths, const std::string& flag,
                                                int64_t vocab_limit);

  int64_t count() const { return count_; }
  int width() const { return width_; }           // bytes per token: 2 (llm.c), 1 (bytes)
  const std::string& kind() const { return kind_; }
  size_t num_shards() const { return shards_.size(); }
  bool lazy() const { return lazy_; }

  // Tokens [begin, begin + n) (inside [0, count)) into dst.
  absl::Status Read(int64_t begin, int64_t n, int64_t* dst) const;
  // The largest id in [begin, begin + n); maps every shard it touches.
  absl::StatusOr<int64_t> MaxId(int64_t begin, int64_t n) const;

 private:
  struct Shard;
  TokenStream() = default;
  // The shard holding position `pos`, mapped (and checked) on first use.
  absl::StatusOr<const TokenFile*> Mapped(size_t shard) const;
  size_t ShardOf(int64_t pos) const;

  std::vector<std::shared_ptr<Shard>> shards_;
  std::vector<int64_t> starts_;  // stream position of each shard's first token
  int64_t count_ = 0;
  int width_ = 2;
  std::string kind_;
  std::string flag_;
  int64_t vocab_limit_ = 0;
  bool lazy_ = false;
};

}  // namespace psync::data
