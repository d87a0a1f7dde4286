#pragma once

// The HTTP/1.1 client side of poold's JSON API: one kept-alive TCP connection with connect, read
// and write timeouts, bodies by Content-Length or chunked; TLS through a SecureTransport
// (tls_client.hpp: OpenSSL in a module opened only for https://). poolrun and poolctl speak to
// poold through this rather than through an HTTP library whose start-up (OpenSSL's) would cost
// every launch more time than the whole pool request.

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace poolrun {

struct HttpResponse {
  int status = 0;
  std::string body;
  std::string location;  // the Location header of a redirect
};

class HttpFailed : public std::runtime_error {
 public:
  enum class Kind {
    kConnect,   // no connection could be made: nothing was sent
    kTransfer,  // the connection failed during the exchange (a reused connection may have closed)
    kRefused,   // TLS: a certificate was refused (the server's, or ours by the server), or the server
                // does not speak TLS: nothing was sent, and trying again will not cure it
  };
  HttpFailed(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// One TLS session over a connected, non-blocking socket, which stays the connection's.
class SecureChannel {
 public:
  virtual ~SecureChannel() = default;
  static constexpr long kWantRead = -2;   // wait until the socket is readable, then call again
  static constexpr long kWantWrite = -3;  // wait until it is writable, then call again
  // Bytes moved (> 0), 0 at the end of the stream, or kWantRead / kWantWrite; throws HttpFailed
  // (kTransfer) on a failure.
  virtual long read(char* data, size_t size) = 0;
  virtual long write(const char* data, size_t size) = 0;
  // Decrypted bytes held that read() returns without the socket being readable.
  virtual bool pending() const = 0;
};

class SecureTransport {
 public:
  virtual ~SecureTransport() = default;
  // Handshakes over `fd` (connected, non-blocking) within `timeout`, checking that the server's
  // certificate is for `host` (a DNS name or an IP address). Throws HttpFailed: kRefused where a
  // certificate was refused or the server speaks no TLS, else kConnect.
  virtual std::unique_ptr<SecureChannel> open(int fd, const std::string& host, int port,
                                              std::chrono::milliseconds timeout) const = 0;
};

class HttpConnection {
 public:
  // With `tls`, every connection is made through it (https://).
  HttpConnection(std::string host, int port, std::string bearer_token,
                 std::shared_ptr<const SecureTransport> tls = nullptr);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Sends METHOD PATH with `body` (JSON, or none where empty) and reads the whole reply. Connects
  // first where no connection is open. Throws HttpFailed; the connection is closed after a failure
  // and after a reply that asks for it.
  HttpResponse request(const std::string& method, const std::string& path, const std::string& body);

  // The whole Authorization header's value from now on ("Bearer T" is what the constructor's token
  // gives; etcd wants its token bare); empty: none.
  void setAuthorization(std::string value) { authorization_ = std::move(value); }
  // Where set, each request's Authorization value is made for it (a MUNGE credential is good for
  // one request): called with the method, the target and whether the request is the first on a
  // new connection; "" sends none.
  using Authorizer =
      std::function<std::string(const std::string& method, const std::string& target, bool first)>;
  void setAuthorizer(Authorizer authorizer) { authorizer_ = std::move(authorizer); }

  std::chrono::milliseconds connect_timeout{5000};  // TCP connect, then the TLS handshake
  std::chrono::milliseconds io_timeout{30000};

 private:
  void open();
  void close() noexcept;
  void sendAll(const std::string& data);
  // Appends what the socket has to buffer_ (at least one byte); false at the end of the stream.
  bool fill();
  // Waits for the socket as a TLS read or write asked (kWantRead / kWantWrite).
  bool waitTls(long want, const char* doing);
  std::string takeLine();  // up to CRLF, reading as needed
  std::string take(size_t n);

  std::string host_;
  int port_;
  std::string authorization_;
  Authorizer authorizer_;
  std::shared_ptr<const SecureTransport> tls_;
  std::unique_ptr<SecureChannel> channel_;  // the TLS session of fd_, where tls_
  int fd_ = -1;
  std::string buffer_;
  bool awaiting_reply_ = false;  // a request sent, nothing of its reply read yet
};

}  // namespace poolrun
