// common/metrics_http_server.h: what each request is answered (Respond,
// without sockets), then the real server on 127.0.0.1: /metrics served,
// wrong paths 404, garbage 400, an oversized head 431, a client that never
// finishes its request 408 while other clients are served, a client that
// never reads a large answer does not hold up the others, more connections
// than allowed 503, a throwing render 500, and Stop() with clients still
// connected. Waits are bounded by socket timeouts, never asserted as speed.
#include "common/metrics_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>

namespace psync {
namespace {

using namespace std::chrono_literals;

std::string Body() { return "psync_up 1\n"; }

TEST(MetricsHttpRespond, ServesMetricsOnGetAndHead) {
  const std::string get = MetricsHttpServer::Respond("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Body);
  EXPECT_EQ(get,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: 11\r\nConnection: close\r\n\r\npsync_up 1\n");
  const std::string head = MetricsHttpServer::Respond("HEAD /metrics HTTP/1.0\n\n", Body);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 11\r\n"), std::string::npos);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");  // no body
  EXPECT_EQ(MetricsHttpServer::Respond("GET /metrics?name[]=x HTTP/1.1\r\n\r\n", Body).rfind("HTTP/1.1 200", 0), 0u);
}

TEST(MetricsHttpRespond, AnswersEverythingElseWithAnError) {
  auto code = [](const std::string& head) {
    const std::string r = MetricsHttpServer::Respond(head, Body);
    return r.substr(0, r.find("\r\n"));
  };
  EXPECT_EQ(code("GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(code("GET /metricsX HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(code("GET /metrics/../etc HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(code("POST /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_NE(MetricsHttpServer::Respond("DELETE /metrics HTTP/1.1\r\n\r\n", Body).find("Allow: GET, HEAD\r\n"),
            std::string::npos);
  EXPECT_EQ(code("GET /metrics HTTP/2.0\r\n\r\n"), "HTTP/1.1 505 HTTP Version Not Supported");
  EXPECT_EQ(code("GET /metrics\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(code("GET  /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(code("GET metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(code("G(T /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(code("\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(code(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n", 13)), "HTTP/1.1 400 Bad Request");
  const std::string failed =
      MetricsHttpServer::Respond("GET /metrics HTTP/1.1\r\n\r\n", []() -> std::string { throw std::runtime_error("boom"); });
  EXPECT_EQ(failed.rfind("HTTP/1.1 500 Internal Server Error\r\n", 0), 0u);
  EXPECT_NE(failed.find("boom"), std::string::npos);
}

// ---------------------------------------------------------------- over sockets

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{20, 0};  // a bound for a hang, not a speed assertion
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Everything until the server closes (or the 20 s bound).
std::string RecvAll(int fd) {
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "connect failed";
  SendAll(fd, request);
  std::string out = RecvAll(fd);
  ::close(fd);
  return out;
}

std::string StatusLine(const std::string& r) { return r.substr(0, r.find("\r\n")); }

std::unique_ptr<MetricsHttpServer> StartServer(MetricsHttpServer::Options o, MetricsHttpServer::Render render) {
  o.host = "127.0.0.1";
  o.port = 0;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> s = MetricsHttpServer::Start(o, std::move(render));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(MetricsHttpServer, ServesMetricsAndRefusesTheRest) {
  std::atomic<int> renders{0};
  MetricsHttpServer::Options o;
  o.min_render_interval = 0ms;
  auto s = StartServer(o, [&] {
    ++renders;
    return std::string("psync_up 1\n");
  });
  ASSERT_NE(s, nullptr);
  EXPECT_GT(s->port(), 0);
  const std::string ok = Exchange(s->port(), "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n");
  EXPECT_EQ(StatusLine(ok), "HTTP/1.1 200 OK");
  EXPECT_EQ(ok.substr(ok.size() - 11), "psync_up 1\n");
  EXPECT_EQ(StatusLine(Exchange(s->port(), "GET /favicon.ico HTTP/1.1\r\n\r\n")), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(StatusLine(Exchange(s->port(), "PUT /metrics HTTP/1.1\r\n\r\n")), "HTTP/1.1 405 Method Not Allowed");
  std::string garbage(3000, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 131 + 7) % 256);
  EXPECT_EQ(StatusLine(Exchange(s->port(), garbage + "\n\n")), "HTTP/1.1 400 Bad Request");
  // A request followed by more bytes than the head (a body, pipelining) is
  // still answered in full, then closed.
  const std::string extra = Exchange(s->port(), "GET /metrics HTTP/1.1\r\n\r\n" + std::string(100000, 'x'));
  EXPECT_EQ(StatusLine(extra), "HTTP/1.1 200 OK");
  EXPECT_EQ(extra.substr(extra.size() - 11), "psync_up 1\n");
  EXPECT_EQ(renders.load(), 2);  // only the two GETs of /metrics rendered
}

TEST(MetricsHttpServer, RefusesAnOversizedRequestHead) {
  MetricsHttpServer::Options o;
  o.max_request_bytes = 1024;
  auto s = StartServer(o, Body);
  ASSERT_NE(s, nullptr);
  const std::string r = Exchange(s->port(), "GET /metrics HTTP/1.1\r\nX-Junk: " + std::string(64 * 1024, 'a'));
  EXPECT_EQ(StatusLine(r), "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(StatusLine(Exchange(s->port(), "GET /metrics HTTP/1.1\r\n\r\n")), "HTTP/1.1 200 OK");
}

TEST(MetricsHttpServer, ASlowClientGets408AndHoldsUpNobody) {
  MetricsHttpServer::Options o;
  o.request_timeout = 300ms;
  auto s = StartServer(o, Body);
  ASSERT_NE(s, nullptr);
  const int slow = Connect(s->port());
  ASSERT_GE(slow, 0);
  SendAll(slow, "GET /metr");  // and nothing more
  // Served while the slow client holds its connection.
  EXPECT_EQ(StatusLine(Exchange(s->port(), "GET /metrics HTTP/1.1\r\n\r\n")), "HTTP/1.1 200 OK");
  // The slow one is told and closed once its time is up.
  EXPECT_EQ(StatusLine(RecvAll(slow)), "HTTP/1.1 408 Request Timeout");
  ::close(slow);
}

TEST(MetricsHttpServer, AClientThatNeverReadsHoldsUpNobody) {
  MetricsHttpServer::Options o;
  o.connection_timeout = 60s;
  const std::string big(8 << 20, 'x');  // beyond the socket buffers
  auto s = StartServer(o, [&] { return big; });
  ASSERT_NE(s, nullptr);
  const int stuck = Connect(s->port());
  ASSERT_GE(stuck, 0);
  int small = 4096;
  ::setsockopt(stuck, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  SendAll(stuck, "GET /metrics HTTP/1.1\r\n\r\n");  // never reads the 8 MB answer
  for (int i = 0; i < 3; ++i) {
    const int fd = Connect(s->port());
    ASSERT_GE(fd, 0);
    SendAll(fd, "HEAD /metrics HTTP/1.1\r\n\r\n");
    EXPECT_EQ(StatusLine(RecvAll(fd)), "HTTP/1.1 200 OK");
    ::close(fd);
  }
  ::close(stuck);
  s->Stop();  // with a connection mid-answer: returns, closes it
}

TEST(MetricsHttpServer, AnswersConnectionsBeyondTheLimit503) {
  MetricsHttpServer::Options o;
  o.max_connections = 2;
  auto s = StartServer(o, Body);
  ASSERT_NE(s, nullptr);
  const int a = Connect(s->port()), b = Connect(s->port());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  // Once a and b hold both slots (the server answers them in turn)...
  SendAll(a, "GET /me");
  SendAll(b, "GET /me");
  std::string third;
  for (int i = 0; i < 100 && StatusLine(third) != "HTTP/1.1 503 Service Unavailable"; ++i) {
    const int c = Connect(s->port());
    ASSERT_GE(c, 0);
    third = RecvAll(c);  // ...the next is told 503 and closed without sending anything
    ::close(c);
  }
  EXPECT_EQ(StatusLine(third), "HTTP/1.1 503 Service Unavailable");
  SendAll(a, "trics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(StatusLine(RecvAll(a)), "HTTP/1.1 200 OK");
  ::close(a);
  ::close(b);
}

TEST(MetricsHttpServer, AThrowingRenderIs500AndTheServerStaysUp) {
  MetricsHttpServer::Options o;
  o.min_render_interval = 0ms;
  std::atomic<bool> fail{true};
  auto s = StartServer(o, [&]() -> std::string {
    if (fail) throw std::runtime_error("render failed");
    return "psync_up 1\n";
  });
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(StatusLine(Exchange(s->port(), "GET /metrics HTTP/1.1\r\n\r\n")), "HTTP/1.1 500 Internal Server Error");
  fail = false;
  EXPECT_EQ(StatusLine(Exchange(s->port(), "GET /metrics HTTP/1.1\r\n\r\n")), "HTTP/1.1 200 OK");
}

TEST(MetricsHttpServer, RendersAtMostOncePerInterval) {
  MetricsHttpServer::Options o;
  o.min_render_interval = 1h;
  std::atomic<int> renders{0};
  auto s = StartServer(o, [&] { return "psync_renders " + std::to_string(++renders) + "\n"; });
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 5; ++i) {
    const std::string r = Exchange(s->port(), "GET /metrics HTTP/1.1\r\n\r\n");
    EXPECT_EQ(r.substr(r.size() - 16), "psync_renders 1\n");
  }
  EXPECT_EQ(renders.load(), 1);
}

TEST(MetricsHttpServer, StartNamesTheAddressItCannotBind) {
  auto first = StartServer({}, Body);
  ASSERT_NE(first, nullptr);
  MetricsHttpServer::Options o;
  o.host = "127.0.0.1";
  o.port = first->port();
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> clash = MetricsHttpServer::Start(o, Body);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(clash.status().message().find("127.0.0.1:" + std::to_string(first->port())), std::string::npos)
      << clash.status();
  o.host = "no-such-host.invalid";
  o.port = 0;
  EXPECT_FALSE(MetricsHttpServer::Start(o, Body).ok());
}

}  // namespace
}  // namespace psync
