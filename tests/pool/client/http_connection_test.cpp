// The HTTP client poolrun and poolctl use to reach poold, against a loopback server that answers
// each request with a canned reply: lengths, chunks, keep-alive and close, and replies that are
// broken or hostile.

#include "poolrun/common/http_connection.hpp"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "poolrun/common/names.hpp"
#include "poolrun/pool/http_pool.hpp"
#include "poolrun/pool/open_pool.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::pool {
namespace {

using ::testing::HasSubstr;

// Accepts connections on 127.0.0.1 and, for every request read, sends the next canned reply
// (closing the connection after a reply that is "", or after every reply with `close_each`).
class CannedServer {
 public:
  explicit CannedServer(std::vector<std::string> replies, bool close_each = false)
      : replies_(std::move(replies)), closeEach_(close_each) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd_, 4);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~CannedServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  std::vector<std::string> requests;
  int connections = 0;

 private:
  void serve() {
    size_t next = 0;
    while (next < replies_.size()) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++connections;
      std::string in;
      while (next < replies_.size()) {
        char buf[4096];
        size_t end;
        while ((end = in.find("\r\n\r\n")) == std::string::npos) {
          ssize_t n = recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          in.append(buf, static_cast<size_t>(n));
        }
        if (end == std::string::npos) break;
        requests.push_back(in.substr(0, end + 4));
        in.erase(0, end + 4);
        const std::string& reply = replies_[next++];
        if (reply.empty()) break;
        send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        if (closeEach_) break;
      }
      close(c);
    }
  }

  std::vector<std::string> replies_;
  bool closeEach_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(HttpConnectionTest, KeepsTheConnectionAcrossRequests) {
  CannedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": true}",
                       "HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}"});
  HttpConnection c("127.0.0.1", server.port(), "s3cret");
  HttpResponse r = c.request("POST", "/v1/leases", "{\"gpus\": 2}");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "{\"a\": true}");
  r = c.request("GET", "/v1/status", "");
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(r.body, "{}");
  EXPECT_EQ(server.connections, 1);
  ASSERT_EQ(server.requests.size(), 2u);
  EXPECT_THAT(server.requests[0], HasSubstr("POST /v1/leases HTTP/1.1\r\n"));
  EXPECT_THAT(server.requests[0], HasSubstr("Authorization: Bearer s3cret\r\n"));
  EXPECT_THAT(server.requests[0], HasSubstr("Content-Length: 11\r\n"));
  EXPECT_THAT(server.requests[1], HasSubstr("GET /v1/status HTTP/1.1\r\n"));
}

TEST(HttpConnectionTest, ChunkedAndCloseDelimitedBodies) {
  CannedServer server(
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"x\"\r\n9;ext=1\r\n: [1, "
       "2]}\r\n0\r\n\r\n",
       "HTTP/1.0 404 Not Found\r\n\r\n{\"error\": \"no such lease\"}"});
  HttpConnection c("localhost", server.port(), "");
  EXPECT_EQ(c.request("GET", "/a", "").body, "{\"x\": [1, 2]}");
  HttpResponse r = c.request("GET", "/b", "");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, "{\"error\": \"no such lease\"}");
  EXPECT_EQ(server.requests[0].find("Authorization"), std::string::npos);
}

TEST(HttpConnectionTest, BrokenRepliesAreTransferFailures) {
  struct Case {
    std::string reply, message;
  };
  for (const Case& k :
       {Case{"SSH-2.0-OpenSSH_9.2\r\n", "not an HTTP reply"},
        Case{"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", "bad Content-Length"},
        Case{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "closed in the middle of the reply body"},
        Case{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"},
        Case{"HTTP/1.1 2x0 OK\r\n\r\n", "bad status"},
        Case{"HTTP/1.1 200 OK\r\nX: " + std::string(70000, 'a') + "\r\n\r\n", "reply headers too large"}}) {
    CannedServer server({k.reply}, true);
    HttpConnection c("127.0.0.1", server.port(), "");
    c.io_timeout = std::chrono::milliseconds(5000);
    try {
      c.request("GET", "/v1/status", "");
      ADD_FAILURE() << "accepted: " << k.reply.substr(0, 60);
    } catch (const HttpFailed& e) {
      EXPECT_EQ(e.kind(), HttpFailed::Kind::kTransfer);
      EXPECT_THAT(e.what(), HasSubstr(k.message)) << k.reply.substr(0, 60);
    }
  }
}

// The pool's HTTP client puts names, lease ids and GPU indexes into paths percent-encoded: a
// CR-LF in a lease id cannot start a header line, a '/' cannot add a path step. (The canned server
// does not read bodies: a POST's "{}" stays in front of the next request.)
// A token that poold would never know, or that would corrupt the request's header, is refused by
// the client before anything is sent: from a token file naming the file, from POOLRUN_TOKEN.
TEST(HttpConnectionTest, TokensOutsideEightToFiveHundredTwelvePrintableCharactersAreRefused) {
  test::TempDir tmp;
  for (const std::string& bad :
       {std::string("abc"), std::string("abc\x01\x7f\xc3(defgh"), std::string(600, 'a')}) {
    const auto file = tmp.write("token", bad + "\n");
    try {
      readClientToken(file, "your token");
      FAIL() << "read " << common::printable(bad);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file.string() + ": your token must be 8 to 512 printable ASCII"),
                std::string::npos)
          << e.what();
    }
    ClientOptions options;
    options.token = bad;
    try {
      openPoolControl("http://127.0.0.1:1", options);
      FAIL() << "a pool opened with " << common::printable(bad);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("must be 8 to 512 printable ASCII characters"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(readClientToken(tmp.write("good", "# mine\n  tok-0123456789 trailing words\n"), "your token"),
            "tok-0123456789");
}

TEST(HttpConnectionTest, ThePoolClientEncodesEveryPathSegment) {
  const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
  CannedServer server({ok, ok, ok, ok, ok});
  ClientOptions options;
  options.token = "tok-0123456789";
  auto pool = openHttpPool("http://127.0.0.1", {{"127.0.0.1", server.port()}}, options);
  pool->release("L1\r\nX-Injected: 1");
  pool->drain("a/b c");
  pool->resume("..");
  pool->failGpu("n%1?x#y", 3);
  EXPECT_ANY_THROW(pool->renew("L2\"\xff"));  // the reply {} has no lease
  ASSERT_EQ(server.requests.size(), 5u);
  EXPECT_THAT(server.requests[0],
              ::testing::StartsWith("DELETE /v1/leases/L1%0D%0AX-Injected%3A%201 HTTP/1.1\r\n"));
  EXPECT_THAT(server.requests[0], ::testing::Not(HasSubstr("\r\nX-Injected")));
  EXPECT_THAT(server.requests[1], HasSubstr("POST /v1/nodes/a%2Fb%20c/drain HTTP/1.1\r\n"));
  EXPECT_THAT(server.requests[2], HasSubstr("POST /v1/nodes/%2E%2E/resume HTTP/1.1\r\n"));
  EXPECT_THAT(server.requests[3], HasSubstr("POST /v1/nodes/n%251%3Fx%23y/gpus/3/fail HTTP/1.1\r\n"));
  EXPECT_THAT(server.requests[4], HasSubstr("POST /v1/leases/L2%22%FF/renew HTTP/1.1\r\n"));
}

TEST(HttpConnectionTest, NobodyListeningIsAConnectFailure) {
  int port;
  {
    CannedServer gone({});
    port = gone.port();
  }
  HttpConnection c("127.0.0.1", port, "");
  try {
    c.request("GET", "/", "");
    ADD_FAILURE() << "connected to a closed port";
  } catch (const HttpFailed& e) {
    EXPECT_EQ(e.kind(), HttpFailed::Kind::kConnect);
    EXPECT_THAT(e.what(), HasSubstr("cannot connect to 127.0.0.1:" + std::to_string(port)));
  }
  HttpConnection bad("no-such-host.invalid", 80, "");
  EXPECT_THROW(bad.request("GET", "/", ""), HttpFailed);
}

// A reply that never comes ends at the read timeout.
TEST(HttpConnectionTest, SilentServerTimesOut) {
  CannedServer server({"", ""});
  HttpConnection c("127.0.0.1", server.port(), "");
  c.io_timeout = std::chrono::milliseconds(200);
  EXPECT_THROW(c.request("GET", "/", ""), HttpFailed);
}

}  // namespace
}  // namespace poolrun::pool
