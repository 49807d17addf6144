// Each method's largest request, checked on the raw bytes before anything
// decodes them. gRPC's transport limit (limits.h kMaxReceiveMessageBytes,
// 16 MiB) is the largest of these (a Join); the others are far below it, so
// a token holder's oversized Status or StoreSet is refused unread instead of
// being decoded (decoding 15 MiB of unknown fields cost ~90 MB). The Train
// stream's messages are checked the same way (train_reactor.cc).
//
// Sizes: control requests are empty or a reason string (4 KiB); StoreSet
// carries a key and a value (kMaxKeyBytes + kMaxValueBytes + 4 KiB); a Join
// carries one ParamSpec per parameter tensor: ~70 bytes each for a 50-byte
// name and two dimensions, so 16 MiB holds ~240,000 tensors (a 671B MoE
// model with 256 experts per layer has ~50,000; dense models a few hundred
// to a few thousand). Its entry count is checked before it is decoded too
// (CountJoinManifest): kMaxParams.
#pragma once

#include <cstddef>
#include <string>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/status.h>

#include "absl/strings/string_view.h"
#include "server/limits.h"

namespace psync::server {

inline constexpr size_t kMaxControlRequestBytes = 4 << 10;
inline constexpr size_t kMaxStoreGetRequestBytes = 4 << 10;
inline constexpr size_t kMaxStoreSetRequestBytes = (1 << 20) + (8 << 10);
inline constexpr size_t kMaxJoinRequestBytes = kMaxReceiveMessageBytes;
inline constexpr size_t kMaxTrainMessageBytes = kMaxReceiveMessageBytes;

// OK when `raw` is at most `max_bytes`, else RESOURCE_EXHAUSTED naming the
// method, the size and the limit.
grpc::Status CheckRequestSize(const grpc::ByteBuffer& raw, absl::string_view method, size_t max_bytes);

// Decodes `raw` as T after CheckRequestSize; INVALID_ARGUMENT naming the
// method when the bytes are not a T. `raw` is emptied either way.
template <typename T>
grpc::Status DecodeRequest(grpc::ByteBuffer* raw, absl::string_view method, size_t max_bytes, T* out) {
  grpc::Status st = CheckRequestSize(*raw, method, max_bytes);
  if (!st.ok()) {
    raw->Clear();
    return st;
  }
  if (!grpc::SerializationTraits<T>::Deserialize(raw, out).ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        std::string(method) + ": the request is not a valid " + T::descriptor()->full_name() +
                            " message");
  }
  return grpc::Status::OK;
}

// `msg` serialized into `out` (a raw method's response).
template <typename T>
void EncodeResponse(const T& msg, grpc::ByteBuffer* out) {
  bool own = false;
  out->Clear();  // Serialize needs an empty buffer (a writer reuses its own)
  (void)grpc::SerializationTraits<T>::Serialize(msg, out, &own);
}

// The number of JoinRequest.manifest entries in `raw`, found by walking the
// top-level fields without decoding them (no allocation); -1 when the bytes
// are not a well-formed message.
long CountJoinManifest(const grpc::ByteBuffer& raw);

}  // namespace psync::server
