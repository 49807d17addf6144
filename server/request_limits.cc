#include "server/request_limits.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "absl/strings/str_cat.h"

namespace psync::server {

grpc::Status CheckRequestSize(const grpc::ByteBuffer& raw, absl::string_view method, size_t max_bytes) {
  const size_t n = raw.Length();
  if (n <= max_bytes) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat(method, ": the request is ", n, " bytes; this method takes at most ", max_bytes));
}

long CountJoinManifest(const grpc::ByteBuffer& raw) {
  using google::protobuf::internal::WireFormatLite;
  constexpr int kManifestField = 7;  // coordinator.proto JoinRequest.manifest
  grpc::ByteBuffer copy(raw);        // shares the slices; the reader consumes its own handle
  grpc::ProtoBufferReader reader(&copy);
  google::protobuf::io::CodedInputStream in(&reader);
  in.SetTotalBytesLimit(static_cast<int>(kMaxJoinRequestBytes) + 1);
  long count = 0;
  while (uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kManifestField &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      ++count;
    }
    if (!WireFormatLite::SkipField(&in, tag)) return -1;
  }
  return in.ConsumedEntireMessage() ? count : -1;
}

}  // namespace psync::server
