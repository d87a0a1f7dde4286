#include "poolrun/pool/http_server.hpp"

#include "poolrun/pool/http_request.hpp"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format off
#include <boost/asio.hpp>
// clang-format on
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "poolrun/common/error.hpp"
#include "tls_context.hpp"

namespace poolrun::pool {
namespace {

using namespace http_request;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// What a handler that threw answers (its exceptions are its own errors, not the client's).
HttpReply internalError() {
  return refusal("internal", "internal error");
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

// What the server holds of a connection, whatever its stream.
class ConnectionBase : public std::enable_shared_from_this<ConnectionBase> {
 public:
  virtual ~ConnectionBase() = default;
  virtual void close() = 0;  // network thread only; idempotent
};

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

struct HttpServer::Impl {
  template <class Stream>
  class Connection;

  HttpServerOptions opt;
  Handler handler;
  Quick quick;
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};
  Workers workers;
  int port = 0;

  // Touched by the network thread only.
  std::map<std::string, int> per_peer;
  std::set<std::shared_ptr<ConnectionBase>> open;
  std::unique_ptr<TlsServerContext> tls;
  bool stopping = false;
  std::chrono::steady_clock::time_point last_tls_warning{};
  uint64_t last_connection = 0;  // the number of the last connection accepted

  std::atomic<int64_t> n_open{0}, n_accepted{0}, n_refused_total{0}, n_refused_peer{0}, n_idle{0},
      n_header{0}, n_body{0}, n_write{0}, n_bad{0}, n_handshake{0}, n_tls_failed{0}, n_plain_on_tls{0};

  Impl(HttpServerOptions o, Handler h, Quick q)
      : opt(std::move(o)), handler(std::move(h)), quick(std::move(q)), workers(std::max(1, opt.workers)) {}

  // One client's connection: plain (Stream = beast::tcp_stream) or TLS (TlsStream), the same
  // reading, deadlines and replies on both.
  template <class Stream>
  class Connection final : public ConnectionBase {
    static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

   public:
    Connection(Impl& server, tcp::socket socket, std::string peer,
               std::shared_ptr<asio::ssl::context> context = nullptr)
        : server_(server),
          context_(std::move(context)),
          stream_(makeStream(std::move(socket), context_.get())),
          peer_(std::move(peer)),
          buffer_(server.opt.max_header_bytes + server.opt.max_body_bytes + 64 * 1024) {}

    void start() {
      beast::error_code ec;
      socket().non_blocking(true, ec);  // for write(): a reply that does not fit waits asynchronously
      if constexpr (kTls)
        detectTls();
      else
        readRequest();
    }

    void close() override {
      if (closed_) return;
      closed_ = true;
      beast::error_code ec;
      // (No TLS close_notify: every reply is framed by its Content-Length, and the client expects none.)
      socket().shutdown(tcp::socket::shutdown_both, ec);
      lowest().close();
      if (--server_.per_peer[peer_] <= 0) server_.per_peer.erase(peer_);
      --server_.n_open;
      server_.open.erase(shared_from_this());
    }

   private:
    static Stream makeStream(tcp::socket socket, asio::ssl::context* context) {
      if constexpr (kTls)
        return Stream(std::move(socket), *context);
      else
        return Stream(std::move(socket));
    }
    beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }
    tcp::socket& socket() { return lowest().socket(); }
    std::shared_ptr<Connection> self() { return std::static_pointer_cast<Connection>(shared_from_this()); }

    // TLS: the first bytes say whether the client speaks TLS; the handshake, as the request's
    // headers, must finish within the header deadline.
    void detectTls() {
      lowest().expires_after(server_.opt.header_timeout);
      beast::async_detect_ssl(lowest(), buffer_, [self = self()](beast::error_code ec, bool isTls) {
        if (ec) {
          if (ec == beast::error::timeout) ++self->server_.n_handshake;
          return self->close();
        }
        if (!isTls) return self->refusePlain();
        self->handshake();
      });
    }

    void handshake() {
      if constexpr (kTls) {
        stream_.async_handshake(asio::ssl::stream_base::server, buffer_.data(),
                                [self = self()](beast::error_code ec, size_t used) {
                                  if (ec) return self->handshakeFailed(ec);
                                  self->buffer_.consume(used);
                                  self->client_names_ = clientCertificateNames(self->stream_.native_handle());
                                  self->readRequest();
                                });
      }
    }

    void handshakeFailed(beast::error_code ec) {
      if (ec == beast::error::timeout) {
        ++server_.n_handshake;
        return close();
      }
      ++server_.n_tls_failed;
      // At most one line a minute: a scanner or a fleet of misconfigured agents must not flood stderr.
      const auto now = std::chrono::steady_clock::now();
      if (server_.opt.warn && now - server_.last_tls_warning >= std::chrono::minutes(1)) {
        server_.last_tls_warning = now;
        server_.opt.warn("TLS handshake from " + peer_ + " failed: " + ec.message() + " (" +
                         std::to_string(server_.n_tls_failed.load()) +
                         " failed since start; at most one said a minute)");
      }
      close();
    }

    // A plain-HTTP client on the HTTPS port: one reply it can read, in plain HTTP, then the end.
    void refusePlain() {
      ++server_.n_plain_on_tls;
      HttpReply r = refusal("https_required",
                            "this poold serves HTTPS only: use https://HOST:" + std::to_string(server_.port) +
                                " (and --ca FILE where its CA is not the system's)");
      auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), 11);
      res->set(http::field::server, "poold");
      res->set(http::field::content_type, r.content_type);
      res->body() = std::move(r.body);
      res->keep_alive(false);
      res->prepare_payload();
      lowest().expires_after(server_.opt.write_timeout);
      http::async_write(lowest(), *res, [self = self(), res](beast::error_code, size_t) { self->close(); });
    }

    void readRequest() {
      if (closed_) return;
      parser_.emplace();
      setLimits(*parser_, server_.opt, headerEnd_);
      if (buffer_.size() > 0) return takeBuffered();
      // Waiting for a request: the idle deadline on a kept-alive connection; the header deadline
      // starts at its first byte. A new connection that has sent nothing yet gets the header
      // deadline (if shorter): a client that connects and says nothing holds a slot of its address
      // no longer than one that is slow to send its headers.
      lowest().expires_after(served_ ? server_.opt.idle_timeout
                                     : std::min(server_.opt.idle_timeout, server_.opt.header_timeout));
      // Room for most requests whole (a heartbeat of 8 GPUs is about 5 KB), so that one read takes
      // them; a connection holds it while it lives (max_connections x 16 KiB at most).
      auto space = buffer_.prepare(std::min<size_t>(16 * 1024, buffer_.max_size() - buffer_.size()));
      stream_.async_read_some(space, [self = self()](beast::error_code ec, size_t n) {
        if (ec) {
          if (ec == beast::error::timeout) ++self->server_.n_idle;
          return self->close();
        }
        self->buffer_.commit(n);
        self->takeBuffered();
      });
    }

    // What the buffer holds parsed at once, without a deadline or a read: most requests arrive
    // whole in one read, and are then dispatched from here. The rest is read as it comes.
    void takeBuffered() {
      beast::error_code ec;
      while (!parser_->is_done() && buffer_.size() > 0) {
        const size_t n = parser_->put(buffer_.data(), ec);
        buffer_.consume(n);
        if (ec == http::error::need_more) {
          ec = {};
          if (n == 0) break;  // not yet a whole header line or chunk line
        } else if (ec) {
          return readFailed(ec, server_.n_header);
        }
      }
      if (parser_->is_done()) return dispatch();
      readHeader();  // (async_read_header goes on from what the parser has taken; so does the body's)
    }

    void readHeader() {
      lowest().expires_after(server_.opt.header_timeout);
      http::async_read_header(stream_, buffer_, *parser_, [self = self()](beast::error_code ec, size_t) {
        if (ec) return self->readFailed(ec, self->server_.n_header);
        const auto& req = self->parser_->get();
        if (beast::iequals(req[http::field::expect], "100-continue") && !self->parser_->is_done()) {
          auto cont =
              std::make_shared<http::response<http::empty_body>>(http::status::continue_, req.version());
          self->lowest().expires_after(self->server_.opt.write_timeout);
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
      lowest().expires_after(server_.opt.body_timeout);
      http::async_read(stream_, buffer_, *parser_, [self = self()](beast::error_code ec, size_t) {
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
      served_ = true;
      bool keepAlive = parser_->get().keep_alive();
      unsigned version = parser_->get().version();
      HttpRequest req;
      HttpReply bad;
      req.client_names = client_names_;
      req.connection = id_;
      if (!takeRequest(*parser_, headerEnd_, peer_, req, bad)) {
        ++server_.n_bad;
        const bool close = bad.close;
        return write(std::move(bad), keepAlive && !close, version);
      }
      QuickAnswer answer;
      if (server_.quick) {
        try {
          answer = server_.quick(req);
        } catch (const std::exception&) {
          answer.reply = internalError();
        }
        if (answer.reply) return write(std::move(*answer.reply), keepAlive, version);
      }
      server_.workers.push([self = self(), req = std::move(req), finish = std::move(answer.finish), keepAlive,
                            version]() mutable {
        HttpReply reply;
        try {
          reply = finish ? finish() : self->server_.handler(req);
        } catch (const std::exception&) {
          reply = internalError();
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
      // Most replies fit the socket's send buffer: written at once, without a deadline to arm or an
      // asynchronous write; the rest of one that does not is written as the client reads, against
      // the write deadline.
      auto sr = std::make_shared<http::serializer<false, http::string_body>>(*res);
      if constexpr (!kTls) {
        beast::error_code ec;
        http::write(socket(), *sr, ec);  // the socket is non-blocking: never waits
        if (!ec) {
          // The next request is read from the network thread's queue, not from here: a client's
          // pipelined requests must not nest one call per request.
          return asio::post(stream_.get_executor(), [self = self(), keepAlive] { self->written(keepAlive); });
        }
        if (ec != asio::error::would_block && ec != asio::error::try_again) return close();
      }
      // (TLS always writes asynchronously: a synchronous write that would block leaves the TLS
      // engine holding bytes nothing could resume from.)
      lowest().expires_after(server_.opt.write_timeout);
      http::async_write(stream_, *sr, [self = self(), res, sr, keepAlive](beast::error_code wec, size_t) {
        if (wec) {
          if (wec == beast::error::timeout) ++self->server_.n_write;
          return self->close();
        }
        self->written(keepAlive);
      });
    }

    void written(bool keepAlive) {
      if (!keepAlive) return close();
      readRequest();
    }

    Impl& server_;
    std::shared_ptr<asio::ssl::context> context_;  // (before stream_, which uses it)
    Stream stream_;
    std::string peer_;
    std::vector<std::string> client_names_;  // of the TLS client's verified certificate
    const uint64_t id_ = ++server_.last_connection;
    beast::flat_buffer buffer_;
    std::optional<Parser> parser_;
    HeaderEnd headerEnd_;  // of parser_'s request
    bool closed_ = false;
    bool served_ = false;  // a request was read on this connection
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
    if (tls) {
      auto c = std::make_shared<Connection<TlsStream>>(*this, std::move(socket), peer, tls->current());
      open.insert(c);
      c->start();
    } else {
      auto c = std::make_shared<Connection<beast::tcp_stream>>(*this, std::move(socket), peer);
      open.insert(c);
      c->start();
    }
  }
};

HttpServer::HttpServer(HttpServerOptions options, Handler handler, Quick quick)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler), std::move(quick))) {
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
  if (!m.opt.tls_cert.empty() || !m.opt.tls_key.empty()) {
    auto warn = m.opt.warn ? m.opt.warn : [](const std::string&) {};
    m.tls = std::make_unique<TlsServerContext>(
        TlsServerFiles{m.opt.tls_cert, m.opt.tls_key, m.opt.tls_client_ca}, warn);
  }
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
  return {m.n_open,
          m.n_accepted,
          m.n_refused_total,
          m.n_refused_peer,
          m.n_idle,
          m.n_header,
          m.n_body,
          m.n_write,
          m.n_bad,
          m.n_handshake,
          m.n_tls_failed,
          m.n_plain_on_tls,
          m.tls ? m.tls->notAfter() : 0};
}

}  // namespace poolrun::pool
