// Raw gRPC calls for the coordinator tests: bytes as they are, whatever a
// well-behaved client would send (garbage, no token, oversized requests).
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>
#include <vector>

namespace psync::test_support {

// A stream call of `method` on `target`: writes each of `messages` (bytes
// as they are), half-closes, reads to the end; the final status. With
// `token`, sends it as "authorization: Bearer <token>".
inline grpc::Status RawStream(const std::string& target, const std::string& method,
                              const std::vector<std::string>& messages, const std::string& token = "") {
  grpc::GenericStub stub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, method, &cq);
  void* tag;
  bool ok;
  intptr_t next = 1;
  auto step = [&] {  // one operation at a time: wait for its completion
    cq.Next(&tag, &ok);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(next++));
  step();
  for (const std::string& m : messages) {
    grpc::Slice slice(m);
    grpc::ByteBuffer bb(&slice, 1);
    call->Write(bb, reinterpret_cast<void*>(next++));
    if (!step()) break;
  }
  call->WritesDone(reinterpret_cast<void*>(next++));
  step();
  grpc::ByteBuffer in;
  do {
    call->Read(&in, reinterpret_cast<void*>(next++));
  } while (step());
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(next++));
  step();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return st;
}

}  // namespace psync::test_support
