#include "server/listen_policy.h"

#include <arpa/inet.h>

#include "absl/strings/str_cat.h"

namespace psync::server {

bool IsLoopbackHost(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

absl::Status CheckListenPolicy(const std::string& host, const std::string& token, bool allow_unauthenticated) {
  if (!token.empty() || allow_unauthenticated || IsLoopbackHost(host)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to serve on ", host,
      " without a token: anyone who can reach it could stop the job or overwrite the rendezvous keys. "
      "Set PSYNC_TOKEN (or --token) for the coordinator and every worker, or listen on 127.0.0.1 "
      "(--host=127.0.0.1), or pass --allow-unauthenticated on a network you trust"));
}

}  // namespace psync::server
