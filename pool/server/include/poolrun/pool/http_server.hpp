#pragma once

// poold's HTTP/1.1 server, on Boost.Beast over Boost.Asio. One network thread owns every socket
// and reads requests asynchronously, so that an idle, slow or half-sent connection holds no
// thread; complete requests run on a fixed pool of worker threads (a handler may wait for a
// commit or a long-poll). Defences against hostile or broken clients:
//   - a limit on open connections, in total and per peer address (past it, closed at once);
//   - deadlines: idle (no request on a kept-alive connection), header (first byte to last header
//     line), body (the whole body), and the reply's write;
//   - a body limit however the body is framed (Content-Length or chunked), and a header limit;
//   - pipelined requests are answered in order, one at a time;
//   - malformed requests get 400 (431, 413) and the connection is closed.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace poolrun::pool {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  int workers = 8;
  size_t max_body_bytes = size_t{1} << 20;
  size_t max_header_bytes = 16 * 1024;
  int max_connections = 4096;
  int max_connections_per_peer = 1024;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds idle_timeout{60000};
  std::chrono::milliseconds write_timeout{30000};
  // HTTPS: with a certificate and its key (PEM files, taken again when they change), every
  // connection is TLS (1.2 or later) and a plain-HTTP request is answered `https_required`. With a
  // client CA, clients are asked for a certificate it signed (not required: the routes decide who
  // must have one, from HttpRequest::client_names). The handshake counts against header_timeout.
  std::filesystem::path tls_cert, tls_key, tls_client_ca;
  std::function<void(const std::string&)> warn;  // what is worth a line on poold's stderr
};

struct HttpRequest {
  std::string method;                        // "GET", "POST", ...
  std::string target;                        // as sent: "/v1/leases/L1%2F2/renew?x=1"
  std::vector<std::string> segments;         // the path's segments, percent-decoded
  std::map<std::string, std::string> query;  // percent-decoded; the last of repeated names
  std::string authorization;                 // the Authorization header, empty where absent
  std::string host;                          // the Host header as sent ("head:7450"), empty where absent
  std::string body;
  // The client's IP address as the socket reports it ("10.1.2.3", "::1"; an IPv4 client of a
  // dual-stack socket as "::ffff:10.1.2.3"): what per-address limits and /metrics access go by.
  std::string peer;
  // TLS: the names of the client's verified certificate (its DNS names, then its CN); empty where
  // it sent none, or the connection is plain.
  std::vector<std::string> client_names;
  // The connection's number, unique while the server runs (never reused): what poold remembers a
  // connection's MUNGE user by. 0 outside a server (tests, the fuzz target).
  uint64_t connection = 0;
};

struct HttpReply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  // Headers beyond Server, Content-Type, Content-Length and Connection ("WWW-Authenticate").
  std::vector<std::pair<std::string, std::string>> headers = {};
  // Closes the connection after the reply: where the request's framing cannot be trusted, what
  // follows it on the connection is no request.
  bool close = false;
};

// poold's reply refusing a request for `reason`, a row of the failure table (http_failures.hpp) that
// gives its status: {"error": MESSAGE, "reason": REASON}, text that is not UTF-8 replaced. Every
// error reply poold writes is one.
HttpReply refusal(std::string_view reason, const std::string& message);

// Counters of what the connection layer refused or cut, for /metrics.
struct HttpServerStats {
  int64_t open = 0;                // connections open now
  int64_t accepted = 0;            // since start
  int64_t refused_total = 0;       // closed at accept: max_connections reached
  int64_t refused_peer = 0;        // closed at accept: max_connections_per_peer reached
  int64_t timeouts_idle = 0;       // kept-alive connections closed for idleness
  int64_t timeouts_header = 0;     // requests whose headers did not arrive in time
  int64_t timeouts_body = 0;       // requests whose body did not arrive in time
  int64_t timeouts_write = 0;      // replies the client did not read in time
  int64_t bad_requests = 0;        // malformed requests (400, 413, 431)
  int64_t timeouts_handshake = 0;  // TLS handshakes that did not finish within header_timeout
  int64_t tls_failures = 0;        // TLS handshakes that failed (a refused certificate, not TLS at all)
  int64_t plain_on_tls = 0;        // plain-HTTP requests on an HTTPS server (answered https_required)
  int64_t tls_not_after = 0;       // when the certificate served expires (seconds since 1970); 0: plain
};

// Splits "/a/b%2Fc/d?x=1&y=%20" into decoded segments and query. False on a malformed escape or
// a decoded segment that is not valid UTF-8 or holds a control character (then nothing is set).
bool parseTarget(const std::string& target, std::vector<std::string>& segments,
                 std::map<std::string, std::string>& query);

// True when `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool validUtf8(const std::string& text);

// Parses one whole request from `bytes` with the server's limits, as a connection reads it: true
// with `out` set, or false with the reply the server would send (400, 413, 431) in `error`.
// For the fuzz target and tests; the server itself reads asynchronously with the same parser.
bool parseRequest(const std::string& bytes, const HttpServerOptions& options, HttpRequest& out,
                  HttpReply& error);

// What the network thread makes of a request before a worker sees it (HttpServer's `quick`): a
// reply to send now, work to finish on a worker (where it may wait), or neither: the request goes
// to the workers' handler as any other.
struct QuickAnswer {
  std::optional<HttpReply> reply;
  std::function<HttpReply()> finish;
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;
  // Runs on the network thread, so it must never wait (for a lock, a disk or another request): a
  // request it answers skips two hand-overs between threads, the most of what a small request costs.
  using Quick = std::function<QuickAnswer(const HttpRequest&)>;

  // Binds and listens (port 0: any free port). Throws poolrun::Error (kIo) when it cannot.
  HttpServer(HttpServerOptions options, Handler handler, Quick quick = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  void run();   // serves until stop(); the calling thread becomes the network thread
  void stop();  // from any thread; run() returns once connections are closed
  HttpServerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace poolrun::pool
