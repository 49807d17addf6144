// MetricsHttpServer: a small HTTP/1.1 server that answers GET /metrics with
// the text a callback renders (the Prometheus text format,
// common/prometheus_text.h), on a thread of its own, so that no HTTP client
// (slow, hostile or many) ever holds up the server it belongs to.
//
// What it serves: GET or HEAD of /metrics (a query string is ignored) ->
// 200 with the rendered text; any other path -> 404; another method -> 405;
// a request line that does not parse -> 400; a request head larger than
// max_request_bytes -> 431; a client that has not sent its whole request
// head within request_timeout -> 408; a render that throws -> 500. Every
// answer closes the connection (Connection: close): Prometheus opens one
// per scrape anyway, and nothing is kept between requests.
//
// What a client can cost: one connection of at most max_request_bytes read
// and one response being written, each for at most connection_timeout
// (then it is closed whatever its state); at most max_connections at once
// (the next are answered 503 and closed at once). The callback runs at most
// once per min_render_interval (a scrape within it gets the same text), so
// clients cannot make it take the caller's locks more often than that.
//
// Threads: Start() binds and starts the server thread, which runs every
// accept, read, render and write (poll() over non-blocking sockets);
// Stop() (or the destructor) wakes it through a pipe and joins it. port()
// from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

class MetricsHttpServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // an address or a name; "0.0.0.0" / "::" for every interface
    int port = 0;                    // 0 = pick a free port (see port())
    size_t max_request_bytes = 8192;
    size_t max_connections = 16;
    std::chrono::milliseconds request_timeout{5000};      // to send the whole request head
    std::chrono::milliseconds connection_timeout{10000};  // for the whole exchange
    std::chrono::milliseconds min_render_interval{100};
  };
  // Renders the body of GET /metrics. May throw (the answer is then 500).
  using Render = std::function<std::string()>;

  // Binds and listens. Unavailable naming HOST:PORT when it cannot.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(Options options, Render render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  void Stop();

  // The whole answer (status line, headers, body) to a complete request
  // head `head` (request line and headers, up to the empty line), with
  // `body` as the text of /metrics. No I/O: what the server thread sends,
  // and what the unit tests check.
  static std::string Respond(absl::string_view head, const std::function<std::string()>& body);
  // A bodiless answer with `code` and a one-line text reason.
  static std::string Status(int code, absl::string_view text);

 private:
  struct Loop;
  MetricsHttpServer() = default;
  int port_ = 0;
  std::unique_ptr<Loop> loop_;  // owned state of the server thread
  std::thread thread_;
};

}  // namespace psync
