#include "common/metrics_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace psync {
namespace {

using Clock = std::chrono::steady_clock;

const char* Reason(int code) {
  switch (code) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

std::string Head(int code, absl::string_view content_type, size_t length, absl::string_view extra = "") {
  return absl::StrCat("HTTP/1.1 ", code, " ", Reason(code), "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", length, "\r\n", extra, "Connection: close\r\n\r\n");
}

bool IsTokenChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

// Where the request head ends (just past its empty line), or npos.
size_t HeadEnd(const std::string& in, size_t from) {
  for (size_t i = from; i < in.size(); ++i) {
    if (in[i] != '\n') continue;
    if (i >= 1 && in[i - 1] == '\n') return i + 1;
    if (i >= 3 && in[i - 1] == '\r' && in[i - 2] == '\n' && in[i - 3] == '\r') return i + 1;
  }
  return std::string::npos;
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

std::string MetricsHttpServer::Status(int code, absl::string_view text) {
  const std::string body = absl::StrCat(text, "\n");
  return Head(code, "text/plain; charset=utf-8", body.size(), code == 405 ? "Allow: GET, HEAD\r\n" : "") + body;
}

std::string MetricsHttpServer::Respond(absl::string_view head, const std::function<std::string()>& body) {
  absl::string_view line = head.substr(0, head.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty()) {
    return Status(400, "bad request line (want: GET /metrics HTTP/1.1)");
  }
  const absl::string_view method = parts[0], target = parts[1], version = parts[2];
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return version.substr(0, 5) == "HTTP/" ? Status(505, "only HTTP/1.0 and HTTP/1.1 are served")
                                           : Status(400, "bad request line (want: GET /metrics HTTP/1.1)");
  }
  if (!std::all_of(method.begin(), method.end(), IsTokenChar) || target.front() != '/') {
    return Status(400, "bad request line (want: GET /metrics HTTP/1.1)");
  }
  if (method != "GET" && method != "HEAD") return Status(405, "only GET and HEAD are served");
  if (target.substr(0, target.find_first_of("?#")) != "/metrics") return Status(404, "not found: only /metrics is served");
  std::string text;
  try {
    text = body();
  } catch (const std::exception& e) {
    return Status(500, absl::StrCat("cannot render the metrics: ", e.what()));
  }
  std::string out = Head(200, "text/plain; version=0.0.4; charset=utf-8", text.size());
  if (method == "GET") out += text;
  return out;
}

// ---------------------------------------------------------------- the server thread

struct MetricsHttpServer::Loop {
  enum class Phase { kReading, kWriting, kDraining };
  struct Conn {
    int fd = -1;
    Phase phase = Phase::kReading;
    std::string in;
    size_t scanned = 0;  // bytes of `in` searched for the end of the head
    std::string out;
    size_t sent = 0;
    Clock::time_point request_deadline, deadline;
  };

  Options opt;
  Render render;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::vector<Conn> conns;
  std::optional<std::string> cached;  // the last rendered text
  Clock::time_point cached_at{};
  Clock::time_point accept_paused_until{};

  ~Loop() {
    for (Conn& c : conns) CloseFd(c.fd);
    CloseFd(listen_fd);
    CloseFd(wake[0]);
    CloseFd(wake[1]);
  }

  std::string Body() {
    const auto now = Clock::now();
    if (!cached || now - cached_at >= opt.min_render_interval) {
      cached = render();  // a throw leaves the old text and becomes a 500
      cached_at = now;
    }
    return *cached;
  }

  void Answer(Conn& c, std::string response) {
    c.out = std::move(response);
    c.sent = 0;
    c.phase = Phase::kWriting;
    c.in.clear();
    c.in.shrink_to_fit();
  }

  void AcceptAll(Clock::time_point now) {
    if (now < accept_paused_until) return;
    for (int i = 0; i < 64; ++i) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        // Why the pause: out of descriptors the listening socket stays
        // readable, and polling it again at once would spin.
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
          accept_paused_until = now + std::chrono::milliseconds(100);
        }
        return;
      }
      if (conns.size() >= opt.max_connections) {
        const std::string busy = Status(503, "too many connections to /metrics; try again");
        (void)::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::close(fd);
        continue;
      }
      Conn c;
      c.fd = fd;
      c.request_deadline = now + opt.request_timeout;
      c.deadline = now + opt.connection_timeout;
      conns.push_back(std::move(c));
    }
  }

  // False when the connection is finished (to be closed).
  bool Read(Conn& c) {
    char buf[4096];
    while (true) {
      const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n == 0) return false;  // the client closed
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (c.phase == Phase::kDraining) continue;  // what follows the request is discarded
      c.in.append(buf, static_cast<size_t>(n));
      const size_t end = HeadEnd(c.in, c.scanned);
      if (end != std::string::npos) {
        Answer(c, Respond(absl::string_view(c.in).substr(0, end), [this] { return Body(); }));
        return true;
      }
      c.scanned = c.in.size() >= 3 ? c.in.size() - 3 : 0;
      if (c.in.size() > opt.max_request_bytes) {
        Answer(c, Status(431, absl::StrCat("request head over ", opt.max_request_bytes, " bytes")));
        return true;
      }
    }
  }

  bool Write(Conn& c, Clock::time_point now) {
    while (c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.sent += static_cast<size_t>(n);
    }
    // Why drain before closing: closing with unread request bytes sends a
    // reset, which can destroy the answer before the client read it.
    ::shutdown(c.fd, SHUT_WR);
    c.out.clear();
    c.out.shrink_to_fit();
    c.phase = Phase::kDraining;
    c.deadline = std::min(c.deadline, now + std::chrono::seconds(1));
    return true;
  }

  // False when the connection is finished.
  bool Serve(Conn& c, short revents, Clock::time_point now) {
    if (c.phase == Phase::kReading && now >= c.request_deadline) {
      Answer(c, Status(408, "the request head did not arrive in time"));
    }
    if (now >= c.deadline) return false;
    if (revents & (POLLERR | POLLNVAL)) return false;
    if (c.phase != Phase::kWriting && (revents & (POLLIN | POLLHUP))) {
      if (!Read(c)) return false;
    }
    if (c.phase == Phase::kWriting) return Write(c, now);
    return true;
  }

  int PollTimeoutMs(Clock::time_point now) const {
    if (conns.empty()) return now < accept_paused_until ? 100 : -1;
    Clock::time_point next = Clock::time_point::max();
    for (const Conn& c : conns) {
      next = std::min(next, c.deadline);
      if (c.phase == Phase::kReading) next = std::min(next, c.request_deadline);
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
  }

  void Run() {
    std::vector<pollfd> fds;
    while (true) {
      fds.clear();
      fds.push_back({wake[0], POLLIN, 0});
      fds.push_back({listen_fd, POLLIN, 0});
      for (const Conn& c : conns) fds.push_back({c.fd, static_cast<short>(c.phase == Phase::kWriting ? POLLOUT : POLLIN), 0});
      const int r = ::poll(fds.data(), fds.size(), PollTimeoutMs(Clock::now()));
      if (r < 0 && errno != EINTR && errno != ENOMEM) return;
      if (r < 0) continue;
      if (fds[0].revents) return;  // Stop()
      const auto now = Clock::now();
      // Why in reverse: erasing keeps the earlier indices (and fds[i + 2]) valid.
      for (size_t i = conns.size(); i-- > 0;) {
        if (!Serve(conns[i], fds[i + 2].revents, now)) {
          CloseFd(conns[i].fd);
          conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      if (fds[1].revents & POLLIN) AcceptAll(now);
    }
  }
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(Options options, Render render) {
  const std::string where = absl::StrCat(options.host, ":", options.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(options.port);
  if (int rc = ::getaddrinfo(options.host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", where, ": ", ::gai_strerror(rc)));
  }
  auto loop = std::make_unique<Loop>();
  std::string why = "no address";
  for (addrinfo* a = res; a != nullptr && loop->listen_fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      loop->listen_fd = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (loop->listen_fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", where, ": ", why));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(loop->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                      : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(loop->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", where, ": pipe: ", std::strerror(errno)));
  }
  loop->opt = std::move(options);
  loop->render = std::move(render);
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->port_ = port;
  s->loop_ = std::move(loop);
  s->thread_ = std::thread([l = s->loop_.get()] { l->Run(); });
  return s;
}

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  const char x = 1;
  (void)!::write(loop_->wake[1], &x, 1);
  thread_.join();
  loop_.reset();  // closes every socket
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

}  // namespace psync
