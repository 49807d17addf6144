#include "server/auth.h"

#include <google/protobuf/descriptor.h>

namespace psync::server {

std::vector<std::string> CoordinatorMethods() {
  std::vector<std::string> out;
  for (const char* service : {"psync.v1.Coordinator", "psync.v1.Control"}) {
    const google::protobuf::ServiceDescriptor* s =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
    for (int i = 0; s != nullptr && i < s->method_count(); ++i) {
      out.push_back("/" + s->full_name() + "/" + s->method(i)->name());
    }
  }
  return out;
}

std::shared_ptr<TokenGate> MakeCoordinatorGate(const std::string& token, std::shared_ptr<RefusalCounters> counters) {
  TokenGateOptions o;
  o.token = token;
  o.open_prefixes = {"/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/",
                     "/grpc.reflection.v1.ServerReflection/"};
  o.server_name = "psync-coordinator";
  o.missing_message =
      "this coordinator requires a token: pass --token or set PSYNC_TOKEN "
      "(metadata 'authorization: Bearer <token>' is missing)";
  o.wrong_message = "invalid token: the coordinator's --token / PSYNC_TOKEN differs from the one sent";
  return std::make_shared<TokenGate>(std::move(o), std::move(counters));
}

}  // namespace psync::server
