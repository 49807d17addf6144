#include "worker/data/token_stream.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "psync/common/status_macros.h"

namespace psync::data {

struct TokenStream::Shard {
  std::string path;
  int64_t count = 0;  // from the header, checked again when mapped
  std::mutex mu;      // guards the three below (the lazy mapping)
  bool tried = false;
  absl::Status status;
  TokenFile file;
};

bool IsShardSet(const std::string& path) {
  std::error_code ec;
  return path.find_first_of("*?[") != std::string::npos || std::filesystem::is_directory(path, ec);
}

absl::StatusOr<std::vector<std::string>> ListShards(const std::string& path, const std::string& flag) {
  std::vector<std::string> out;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
      if (e.is_regular_file() && e.path().extension() == ".bin") out.push_back(e.path().string());
    }
    if (ec) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot list the directory: ", ec.message()));
    const auto has = [&](const char* s) {
      return std::any_of(out.begin(), out.end(), [&](const std::string& p) {
        return absl::StrContains(std::filesystem::path(p).filename().string(), s);
      });
    };
    if (has("_train_") && has("_val_")) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " ", path, ": the directory holds both training (*_train_*) and validation (*_val_*) shards; ",
          "pass a glob instead, e.g. ", flag, "='", path, "/*_train_*.bin'"));
    }
  } else {
    glob_t g{};
    const int rc = ::glob(path.c_str(), GLOB_ERR, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) {
      if (std::filesystem::is_regular_file(g.gl_pathv[i], ec)) out.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": glob failed"));
  }
  if (out.empty()) {
    return absl::NotFoundError(absl::StrCat(flag, " ", path, ": no shard files ",
                                            std::filesystem::is_directory(path, ec) ? "(*.bin) in the directory"
                                                                                    : "match the pattern"));
  }
  std::sort(out.begin(), out.end());
  return out;
}

TokenStream::TokenStream(TokenFile file) : count_(file.count), width_(file.width), kind_(file.kind) {
  auto s = std::make_shared<Shard>();
  s->path = file.file ? file.file->path() : "";
  s->count = file.count;
  s->tried = true;
  s->file = std::move(file);
  shards_.push_back(std::move(s));
  starts_.push_back(0);
}

absl::StatusOr<TokenStream> TokenStream::OpenShards(const std::vector<std::string>& paths, const std::string& flag,
                                                    int64_t vocab_limit) {
  TokenStream t;
  t.kind_ = "llm.c";
  t.width_ = 2;
  t.flag_ = flag;
  t.vocab_limit_ = vocab_limit;
  t.lazy_ = true;
  for (const std::string& p : paths) {
    PSYNC_ASSIGN_OR_RETURN(int64_t n, ReadLlmcTokenCount(p, absl::StrCat(flag, " shard")));
    auto s = std::make_shared<Shard>();
    s->path = p;
    s->count = n;
    t.starts_.push_back(t.count_);
    t.count_ += n;
    t.shards_.push_back(std::move(s));
  }
  return t;
}

absl::StatusOr<const TokenFile*> TokenStream::Mapped(size_t index) const {
  Shard& s = *shards_[index];
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.tried) {
    s.tried = true;
    const std::string what = absl::StrCat(flag_, " shard");
    absl::StatusOr<TokenFile> f = OpenLlmcTokens(s.path, what);
    if (!f.ok()) {
      s.status = f.status();
    } else if (f->count != s.count) {
      s.status = absl::FailedPreconditionError(absl::StrCat(what, " ", s.path, ": holds ", f->count,
                                                            " tokens now, but ", s.count,
                                                            " when the data was opened: shards must not change while training"));
    } else {
      s.file = *std::move(f);
    }
  }
  if (!s.status.ok()) return s.status;
  return &s.file;
}

size_t TokenStream::ShardOf(int64_t pos) const {
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin() - 1);
}

absl::Status TokenStream::Read(int64_t begin, int64_t n, int64_t* dst) const {
  for (size_t k = ShardOf(begin); n > 0; ++k) {
    PSYNC_ASSIGN_OR_RETURN(const TokenFile* f, Mapped(k));
    const int64_t from = begin - starts_[k];
    const int64_t take = std::min(n, f->count - from);
    for (int64_t i = 0; i < take; ++i) dst[i] = f->at(from + i);
    if (vocab_limit_ > 0) {
      for (int64_t i = 0; i < take; ++i) {
        if (dst[i] >= vocab_limit_) {
          return absl::InvalidArgumentError(absl::StrCat(flag_, " shard ", shards_[k]->path, ": token ", from + i,
                                                         " is id ", dst[i], ", outside the model's vocabulary of ",
                                                         vocab_limit_, " (--vocab-size)"));
        }
      }
    }
    dst += take;
    begin += take;
    n -= take;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TokenStream::MaxId(int64_t begin, int64_t n) const {
  int64_t best = 0;
  for (size_t k = ShardOf(begin); n > 0; ++k) {
    PSYNC_ASSIGN_OR_RETURN(const TokenFile* f, Mapped(k));
    const int64_t from = begin - starts_[k];
    const int64_t take = std::min(n, f->count - from);
    const uint8_t* p = f->tokens + from * f->width;
    if (f->width == 2) {
      uint32_t m = 0;
      for (int64_t i = 0; i < take; ++i) m = std::max(m, uint32_t{p[2 * i]} | (uint32_t{p[2 * i + 1]} << 8));
      best = std::max<int64_t>(best, m);
    } else if (take > 0) {
      best = std::max<int64_t>(best, *std::max_element(p, p + take));
    }
    begin += take;
    n -= take;
  }
  return best;
}

}  // namespace psync::data
