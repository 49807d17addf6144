// libFuzzer target for the safetensors reader (and through it the JSON
// parser): any input must yield either tensors that exactly tile the data
// section or an error naming the source, never a crash, leak or UB.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/json.h"
#include "worker/safetensors/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto r = psync::safetensors::ParseWithMetadata(bytes, "fuzz");
  if (r.ok()) {
    uint64_t n = 0;
    std::memcpy(&n, data, 8);  // ok() implies size >= 8
    uint64_t total = 0;
    for (const auto& [name, t] : r->tensors) total += t.nbytes();
    if (total != size - 8 - n) std::abort();
    // What we accept, we can write back, and it parses to the same tensors.
    auto again = psync::safetensors::Serialize(r->tensors, r->metadata);
    if (!again.ok()) std::abort();
    auto r2 = psync::safetensors::Parse(*again, "fuzz-rewrite");
    if (!r2.ok() || r2->size() != r->tensors.size()) std::abort();
  } else if (r.status().message().find("safetensors file fuzz: ") == absl::string_view::npos) {
    std::abort();
  }
  // The header text alone also exercises the JSON parser/writer round trip.
  if (size > 8) {
    auto v = psync::json::Parse(bytes.substr(8));
    if (v.ok()) {
      auto back = psync::json::Parse(psync::json::Serialize(*v));
      if (!back.ok() || !(*back == *v)) std::abort();
    }
  }
  return 0;
}
