#include "poolrun/common/http_connection.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "poolrun/common/text.hpp"

namespace poolrun {
namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
constexpr size_t kMaxBodyBytes = size_t{256} << 20;

// Waits until `fd` is ready for `events`; false on timeout.
bool waitFor(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{fd, events, 0};
  for (;;) {
    int r = poll(&p, 1, static_cast<int>(timeout.count()));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

HttpFailed transferError(const std::string& what) {
  return HttpFailed(HttpFailed::Kind::kTransfer, what);
}

size_t parseSize(const std::string& text, int base, const std::string& what) {
  if (text.empty()) throw transferError("empty " + what);
  size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &used, base);
  } catch (const std::exception&) {
    throw transferError("bad " + what + " '" + text.substr(0, 32) + "'");
  }
  if (used != text.size() || v > kMaxBodyBytes)
    throw transferError("bad " + what + " '" + text.substr(0, 32) + "'");
  return static_cast<size_t>(v);
}

}  // namespace

HttpConnection::HttpConnection(std::string host, int port, std::string bearer_token,
                               std::shared_ptr<const SecureTransport> tls)
    : host_(std::move(host)),
      port_(port),
      authorization_(bearer_token.empty() ? "" : "Bearer " + bearer_token),
      tls_(std::move(tls)) {}

HttpConnection::~HttpConnection() {
  close();
}

void HttpConnection::close() noexcept {
  channel_.reset();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffer_.clear();
  awaiting_reply_ = false;
}

void HttpConnection::open() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string port = std::to_string(port_);
  if (int rc = getaddrinfo(host_.c_str(), port.c_str(), &hints, &found); rc != 0)
    throw HttpFailed(HttpFailed::Kind::kConnect, "cannot resolve '" + host_ + "': " + gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      int err = ETIMEDOUT;
      socklen_t len = sizeof err;
      if (waitFor(fd, POLLOUT, connect_timeout) && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
        rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      freeaddrinfo(found);
      if (tls_) {
        try {
          channel_ = tls_->open(fd, host_, port_, connect_timeout);
        } catch (...) {
          ::close(fd);
          throw;
        }
      }
      fd_ = fd;
      return;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(found);
  throw HttpFailed(HttpFailed::Kind::kConnect, "cannot connect to " + host_ + ":" + port + ": " + why);
}

bool HttpConnection::waitTls(long want, const char* doing) {
  if (want != SecureChannel::kWantRead && want != SecureChannel::kWantWrite) return false;
  if (!waitFor(fd_, want == SecureChannel::kWantRead ? POLLIN : POLLOUT, io_timeout))
    throw transferError(std::string("timed out ") + doing);
  return true;
}

void HttpConnection::sendAll(const std::string& data) {
  size_t sent = 0;
  while (channel_ && sent < data.size()) {
    const long n = channel_->write(data.data() + sent, data.size() - sent);
    if (n > 0)
      sent += static_cast<size_t>(n);
    else if (!waitTls(n, "sending the request"))
      throw transferError("the connection closed while sending the request");
  }
  while (sent < data.size()) {
    ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitFor(fd_, POLLOUT, io_timeout)) throw transferError("timed out sending the request");
    } else if (n < 0 && errno != EINTR) {
      throw transferError(std::string("cannot send the request: ") + std::strerror(errno));
    }
  }
}

bool HttpConnection::fill() {
  char chunk[16384];
  // The first read after a request: the reply is hardly ever there yet, so wait for it first
  // (one poll, not a read that finds nothing and then the poll).
  if (std::exchange(awaiting_reply_, false) && !(channel_ && channel_->pending()) &&
      !waitFor(fd_, POLLIN, io_timeout))
    throw transferError("timed out waiting for the reply");
  while (channel_) {
    const long n = channel_->read(chunk, sizeof chunk);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) return false;
    waitTls(n, "waiting for the reply");
  }
  for (;;) {
    ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) return false;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!waitFor(fd_, POLLIN, io_timeout)) throw transferError("timed out waiting for the reply");
    } else if (errno != EINTR) {
      throw transferError(std::string("cannot read the reply: ") + std::strerror(errno));
    }
  }
}

std::string HttpConnection::takeLine() {
  size_t end;
  while ((end = buffer_.find("\r\n")) == std::string::npos) {
    if (buffer_.size() > kMaxHeaderBytes) throw transferError("reply headers too large");
    if (!fill()) throw transferError("the connection closed in the middle of the reply");
  }
  std::string line = buffer_.substr(0, end);
  buffer_.erase(0, end + 2);
  return line;
}

std::string HttpConnection::take(size_t n) {
  while (buffer_.size() < n) {
    if (!fill()) throw transferError("the connection closed in the middle of the reply body");
  }
  std::string out = buffer_.substr(0, n);
  buffer_.erase(0, n);
  return out;
}

HttpResponse HttpConnection::request(const std::string& method, const std::string& path,
                                     const std::string& body) {
  const bool first = fd_ < 0;
  if (first) open();
  try {
    std::string head = method + " " + path + " HTTP/1.1\r\nHost: " + host_ + ":" + std::to_string(port_) +
                       "\r\nAccept: application/json\r\n";
    const std::string authorization = authorizer_ ? authorizer_(method, path, first) : authorization_;
    if (!authorization.empty()) head += "Authorization: " + authorization + "\r\n";
    if (!body.empty()) head += "Content-Type: application/json\r\n";
    head += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    sendAll(head + body);
    awaiting_reply_ = buffer_.empty();

    HttpResponse response;
    std::string status = takeLine();
    // "HTTP/1.1 200 OK"
    if (status.rfind("HTTP/1.", 0) != 0 || status.size() < 12)
      throw transferError("not an HTTP reply: '" + status.substr(0, 40) + "'");
    response.status = static_cast<int>(parseSize(status.substr(9, 3), 10, "status"));
    bool keepAlive = status.rfind("HTTP/1.1", 0) == 0;
    bool chunked = false;
    std::optional<size_t> length;
    size_t headerBytes = 0;
    for (std::string line = takeLine(); !line.empty(); line = takeLine()) {
      headerBytes += line.size();
      if (headerBytes > kMaxHeaderBytes) throw transferError("reply headers too large");
      size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = common::lower(common::trim(std::string_view(line).substr(0, colon)));
      std::string value(common::trim(std::string_view(line).substr(colon + 1)));
      if (name == "content-length") length = parseSize(value, 10, "Content-Length");
      if (name == "transfer-encoding") chunked = common::lower(value).find("chunked") != std::string::npos;
      if (name == "connection") keepAlive = common::lower(value) != "close";
      if (name == "location") response.location = value;
    }
    if (chunked) {
      for (;;) {
        std::string sizeLine = takeLine();
        size_t n =
            parseSize(std::string(common::trim(std::string_view(sizeLine).substr(0, sizeLine.find(';')))), 16,
                      "chunk size");
        if (response.body.size() + n > kMaxBodyBytes) throw transferError("reply body too large");
        if (n == 0) {
          while (!takeLine().empty()) {
          }  // trailers
          break;
        }
        response.body += take(n);
        if (!takeLine().empty()) throw transferError("malformed chunk");
      }
    } else if (length) {
      response.body = take(*length);
    } else {
      while (fill()) {
        if (buffer_.size() > kMaxBodyBytes) throw transferError("reply body too large");
      }
      response.body = std::move(buffer_);
      keepAlive = false;
    }
    if (!keepAlive) close();
    return response;
  } catch (...) {
    close();
    throw;
  }
}

}  // namespace poolrun
