#include "worker/control/gloo_host.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace psync::control {

absl::StatusOr<std::string> DeriveGlooHost(const std::string& coordinator) {
  const size_t colon = coordinator.rfind(':');
  std::string host = coordinator.substr(0, colon);
  const std::string port = coordinator.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") return std::string("127.0.0.1");
  struct addrinfo hints {};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  struct addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve coordinator host '", host, "': ", gai_strerror(rc)));
  }
  auto* sin = reinterpret_cast<sockaddr_in*>(res->ai_addr);
  if ((ntohl(sin->sin_addr.s_addr) >> 24) == 127) {
    freeaddrinfo(res);
    return std::string("127.0.0.1");
  }
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  std::string out;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {  // UDP: no packet is sent
    sockaddr_in local {};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      if (inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf))) out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (out.empty()) return absl::UnavailableError(absl::StrCat("no local address routes to coordinator ", coordinator));
  return out;
}

}  // namespace psync::control
