#pragma once

// The HTTP/1.1 client side of poold's JSON API: one kept-alive TCP connection with connect, read
// and write timeouts, bodies by Content-Length or chunked. poolrun and poolctl speak to poold
// through this rather than through an HTTP library whose start-up (OpenSSL's) would cost every
// launch more time than the whole pool request.

#include <chrono>
#include <stdexcept>
#include <string>

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
  };
  HttpFailed(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

class HttpConnection {
 public:
  HttpConnection(std::string host, int port, std::string bearer_token);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Sends METHOD PATH with `body` (JSON, or none where empty) and reads the whole reply. Connects
  // first where no connection is open. Throws HttpFailed; the connection is closed after a failure
  // and after a reply that asks for it.
  HttpResponse request(const std::string& method, const std::string& path, const std::string& body);

  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds io_timeout{30000};

 private:
  void open();
  void close() noexcept;
  void sendAll(const std::string& data);
  // Appends what the socket has to buffer_ (at least one byte); false at the end of the stream.
  bool fill();
  std::string takeLine();  // up to CRLF, reading as needed
  std::string take(size_t n);

  std::string host_;
  int port_;
  std::string token_;
  int fd_ = -1;
  std::string buffer_;
  bool awaiting_reply_ = false;  // a request sent, nothing of its reply read yet
};

}  // namespace poolrun
