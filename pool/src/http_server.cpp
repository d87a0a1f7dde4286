#include "http_server.hpp"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format off
#include <boost/asio.hpp>
// clang-format on
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "poolrun/topo/error.hpp"
#include "poolrun/topo/names.hpp"

namespace poolrun::pool {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `text` ('+' stays '+': this is a path, and poold's clients encode spaces as
// %20 in queries too). False on a truncated or non-hex escape.
bool percentDecode(std::string_view text, std::string& out) {
  out.clear();
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    int hi = i + 1 < text.size() ? hexValue(text[i + 1]) : -1;
    int lo = i + 2 < text.size() ? hexValue(text[i + 2]) : -1;
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

std::string errorBody(const std::string& message, const char* reason) {
  return nlohmann::json{{"error", message}, {"reason", reason}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool hasControl(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

using Parser = http::request_parser<http::string_body>;

void setLimits(Parser& parser, const HttpServerOptions& options) {
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
  parser.body_limit(options.max_body_bytes);
}

// The reply to a request that could not be parsed.
HttpReply failureReply(beast::error_code ec, const HttpServerOptions& options) {
  HttpReply r;
  if (ec == http::error::body_limit) {
    r.status = 413;
    r.body = errorBody("request body over the limit of " + std::to_string(options.max_body_bytes) +
                           " bytes (poold --max-body), however it is framed",
                       "too_large");
  } else if (ec == http::error::header_limit) {
    r.status = 431;
    r.body =
        errorBody("request headers over the limit of " + std::to_string(options.max_header_bytes) + " bytes",
                  "bad_request");
  } else {
    r.status = 400;
    r.body = errorBody("malformed HTTP request: " + ec.message(), "bad_request");
  }
  return r;
}

// The parsed message as the handler sees it; false, with the reply, where its target is bad.
bool takeRequest(Parser& parser, const std::string& peer, HttpRequest& req, HttpReply& error) {
  auto& msg = parser.get();
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.authorization = std::string(msg[http::field::authorization]);
  req.body = std::move(msg.body());
  req.peer = peer;
  if (parseTarget(req.target, req.segments, req.query)) return true;
  error.status = 400;
  error.body = errorBody("malformed request path: a bad %-escape, invalid UTF-8 or a control character",
                         "bad_request");
  return false;
}

// A fixed pool of threads that run tasks in arrival order.
class Workers {
 public:
  explicit Workers(int count) {
    for (int i = 0; i < count; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Workers() { stop(); }
  void push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

bool validUtf8(const std::string& text) {
  return topo::utf8ErrorOffset(text) == text.size();
}

bool parseTarget(const std::string& target, std::vector<std::string>& segments,
                 std::map<std::string, std::string>& query) {
  std::vector<std::string> segs;
  std::map<std::string, std::string> q;
  std::string_view t(target);
  size_t mark = t.find('?');
  std::string_view path = t.substr(0, mark);
  if (path.empty() || path.front() != '/') return false;
  std::string decoded;
  for (size_t start = 1; start <= path.size();) {
    size_t end = std::min(path.find('/', start), path.size());
    if (!percentDecode(path.substr(start, end - start), decoded) || !validUtf8(decoded) ||
        hasControl(decoded))
      return false;
    if (!decoded.empty() || end < path.size()) segs.push_back(decoded);
    start = end + 1;
  }
  if (mark != std::string_view::npos) {
    std::string_view rest = t.substr(mark + 1);
    for (size_t start = 0; start < rest.size();) {
      size_t end = std::min(rest.find('&', start), rest.size());
      std::string_view pair = rest.substr(start, end - start);
      size_t eq = pair.find('=');
      std::string key, value;
      if (!percentDecode(pair.substr(0, eq), key) ||
          !percentDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), value) ||
          !validUtf8(key) || !validUtf8(value) || hasControl(key) || hasControl(value))
        return false;
      if (!key.empty()) q[key] = value;
      start = end + 1;
    }
  }
  segments = std::move(segs);
  query = std::move(q);
  return true;
}

bool parseRequest(const std::string& bytes, const HttpServerOptions& options, HttpRequest& out,
                  HttpReply& error) {
  Parser parser;
  setLimits(parser, options);
  beast::error_code ec;
  size_t used = 0;
  while (!parser.is_done() && used < bytes.size()) {
    size_t n = parser.put(asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) {
      ec = {};
      if (n == 0) break;  // the rest is not a whole header or chunk line: the input ends here
    } else if (ec) {
      break;
    }
  }
  if (!ec && !parser.is_done()) {
    parser.put_eof(ec);
    if (!ec && !parser.is_done()) ec = http::error::partial_message;
  }
  if (ec) {
    error = failureReply(ec, options);
    return false;
  }
  return takeRequest(parser, "fuzz", out, error);
}

struct HttpServer::Impl {
  class Connection;

  HttpServerOptions opt;
  Handler handler;
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};
  Workers workers;
  int port = 0;

  // Touched by the network thread only.
  std::map<std::string, int> per_peer;
  std::set<std::shared_ptr<Connection>> open;
  bool stopping = false;

  std::atomic<int64_t> n_open{0}, n_accepted{0}, n_refused_total{0}, n_refused_peer{0}, n_idle{0},
      n_header{0}, n_body{0}, n_write{0}, n_bad{0};

  Impl(HttpServerOptions o, Handler h)
      : opt(std::move(o)), handler(std::move(h)), workers(std::max(1, opt.workers)) {}

  class Connection : public std::enable_shared_from_this<Connection> {
   public:
    Connection(Impl& server, tcp::socket socket, std::string peer)
        : server_(server),
          stream_(std::move(socket)),
          peer_(std::move(peer)),
          buffer_(server.opt.max_header_bytes + server.opt.max_body_bytes + 64 * 1024) {}

    void start() { readRequest(); }

    // Network thread only; idempotent.
    void close() {
      if (closed_) return;
      closed_ = true;
      beast::error_code ec;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      stream_.close();
      if (--server_.per_peer[peer_] <= 0) server_.per_peer.erase(peer_);
      --server_.n_open;
      server_.open.erase(shared_from_this());
    }

   private:
    void readRequest() {
      if (closed_) return;
      parser_.emplace();
      setLimits(*parser_, server_.opt);
      if (buffer_.size() > 0) return readHeader();
      // Waiting for a request: the idle deadline; the header deadline starts at its first byte.
      stream_.expires_after(server_.opt.idle_timeout);
      auto space = buffer_.prepare(4096);
      stream_.async_read_some(space, [self = shared_from_this()](beast::error_code ec, size_t n) {
        if (ec) {
          if (ec == beast::error::timeout) ++self->server_.n_idle;
          return self->close();
        }
        self->buffer_.commit(n);
        self->readHeader();
      });
    }

    void readHeader() {
      stream_.expires_after(server_.opt.header_timeout);
      http::async_read_header(
          stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
            if (ec) return self->readFailed(ec, self->server_.n_header);
            const auto& req = self->parser_->get();
            if (beast::iequals(req[http::field::expect], "100-continue") && !self->parser_->is_done()) {
              auto cont =
                  std::make_shared<http::response<http::empty_body>>(http::status::continue_, req.version());
              self->stream_.expires_after(self->server_.opt.write_timeout);
              http::async_write(self->stream_, *cont, [self, cont](beast::error_code wec, size_t) {
                if (wec) {
                  if (wec == beast::error::timeout) ++self->server_.n_write;
                  return self->close();
                }
                self->readBody();
              });
              return;
            }
            self->readBody();
          });
    }

    void readBody() {
      if (parser_->is_done()) return dispatch();
      stream_.expires_after(server_.opt.body_timeout);
      http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec) return self->readFailed(ec, self->server_.n_body);
        self->dispatch();
      });
    }

    // A request that could not be read: a reply where the client can still take one.
    void readFailed(beast::error_code ec, std::atomic<int64_t>& timeouts) {
      if (ec == beast::error::timeout) {
        ++timeouts;
        return close();
      }
      if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
          ec == asio::error::operation_aborted || ec == http::error::partial_message)
        return close();
      ++server_.n_bad;
      HttpReply r = failureReply(ec, server_.opt);
      write(std::move(r), false, 11);
    }

    void dispatch() {
      bool keepAlive = parser_->get().keep_alive();
      unsigned version = parser_->get().version();
      HttpRequest req;
      HttpReply bad;
      if (!takeRequest(*parser_, peer_, req, bad)) {
        ++server_.n_bad;
        return write(std::move(bad), keepAlive, version);
      }
      server_.workers.push([self = shared_from_this(), req = std::move(req), keepAlive, version]() mutable {
        HttpReply reply;
        try {
          reply = self->server_.handler(req);
        } catch (const std::exception&) {
          reply.status = 500;
          reply.body = errorBody("internal error", "internal");
        }
        auto executor = self->stream_.get_executor();
        asio::post(executor, [self = std::move(self), reply = std::move(reply), keepAlive,
                              version]() mutable { self->write(std::move(reply), keepAlive, version); });
      });
    }

    void write(HttpReply reply, bool keepAlive, unsigned version) {
      if (closed_) return;
      keepAlive = keepAlive && !server_.stopping;
      auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(reply.status),
                                                                     version);
      res->set(http::field::server, "poold");
      res->set(http::field::content_type, reply.content_type);
      for (const auto& [name, value] : reply.headers) res->set(name, value);
      res->body() = std::move(reply.body);
      res->keep_alive(keepAlive);
      res->prepare_payload();
      stream_.expires_after(server_.opt.write_timeout);
      http::async_write(stream_, *res,
                        [self = shared_from_this(), res, keepAlive](beast::error_code ec, size_t) {
                          if (ec) {
                            if (ec == beast::error::timeout) ++self->server_.n_write;
                            return self->close();
                          }
                          if (!keepAlive) return self->close();
                          self->readRequest();
                        });
    }

    Impl& server_;
    beast::tcp_stream stream_;
    std::string peer_;
    beast::flat_buffer buffer_;
    std::optional<Parser> parser_;
    bool closed_ = false;
  };

  void accept() {
    acceptor.async_accept([self = this](beast::error_code ec, tcp::socket socket) {
      if (self->stopping) return;
      if (ec) {
        // Out of descriptors (EMFILE, ENFILE) or a transient failure: try again shortly rather than
        // spinning on an accept that fails at once.
        self->accept_retry.expires_after(std::chrono::milliseconds(50));
        self->accept_retry.async_wait([self](beast::error_code) {
          if (!self->stopping) self->accept();
        });
        return;
      }
      self->admit(std::move(socket));
      self->accept();
    });
  }

  void admit(tcp::socket socket) {
    beast::error_code ec;
    auto remote = socket.remote_endpoint(ec);
    if (ec) return;
    std::string peer = remote.address().to_string();
    ++n_accepted;
    if (n_open >= opt.max_connections) {
      ++n_refused_total;
      socket.close(ec);
      return;
    }
    int& fromPeer = per_peer[peer];
    if (fromPeer >= opt.max_connections_per_peer) {
      ++n_refused_peer;
      socket.close(ec);
      return;
    }
    ++fromPeer;
    ++n_open;
    socket.set_option(tcp::no_delay(true), ec);
    auto c = std::make_shared<Connection>(*this, std::move(socket), peer);
    open.insert(c);
    c->start();
  }
};

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {
  Impl& m = *impl_;
  beast::error_code ec;
  auto address = asio::ip::make_address(m.opt.host, ec);
  if (ec)
    throw badInput("cannot listen on '" + m.opt.host +
                   "': not an IP address (use e.g. 127.0.0.1 or 0.0.0.0)");
  tcp::endpoint endpoint(address, static_cast<unsigned short>(m.opt.port));
  m.acceptor.open(endpoint.protocol(), ec);
  if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(endpoint, ec);
  if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw Error(ErrorCode::kIo, "cannot listen on " + m.opt.host + ":" + std::to_string(m.opt.port) + " (" +
                                    ec.message() + "): in use, or not an address of this machine");
  m.port = m.acceptor.local_endpoint().port();
}

HttpServer::~HttpServer() {
  stop();
  impl_->workers.stop();
}

int HttpServer::port() const {
  return impl_->port;
}

void HttpServer::run() {
  impl_->accept();
  impl_->ioc.run();
}

void HttpServer::stop() {
  Impl* m = impl_.get();
  asio::post(m->ioc, [m] {
    m->stopping = true;
    beast::error_code ec;
    m->acceptor.close(ec);
    m->accept_retry.cancel();
    auto open = m->open;
    for (const auto& c : open) c->close();
    m->ioc.stop();
  });
}

HttpServerStats HttpServer::stats() const {
  const Impl& m = *impl_;
  return {m.n_open,   m.n_accepted, m.n_refused_total, m.n_refused_peer, m.n_idle,
          m.n_header, m.n_body,     m.n_write,         m.n_bad};
}

}  // namespace poolrun::pool
