// HttpServer's quick path: what the network thread answers itself (a reply now, or work finished
// on a worker) and what it leaves to the workers, over real connections on 127.0.0.1.

#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "poolrun/common/http_connection.hpp"
#include "poolrun/pool/http_server.hpp"

namespace poolrun::pool {
namespace {

class QuickServer : public ::testing::Test {
 protected:
  QuickServer()
      : server_(
            options(), [this](const HttpRequest& req) { return onWorker(req); },
            [this](const HttpRequest& req) { return quick(req); }) {
    network_ = std::thread([this] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        network_id_ = std::this_thread::get_id();
      }
      server_.run();
    });
  }
  ~QuickServer() override {
    server_.stop();
    network_.join();
  }

  static HttpServerOptions options() {
    HttpServerOptions o;
    o.write_timeout = std::chrono::seconds(3);  // long enough to read kBigBody on a loaded machine
    return o;
  }

  // A body far larger than a socket's send buffer, every byte telling its place.
  static std::string bigBody() {
    std::string body(kBigBody, ' ');
    for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + (i * 7 + i / 4096) % 26);
    return body;
  }
  static constexpr size_t kBigBody = 16 << 20;  // 4 times what a socket sends (tcp_wmem) unread

  HttpReply onWorker(const HttpRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    worker_ids_.insert(std::this_thread::get_id());
    if (req.segments.at(0) == "big") return {200, bigBody(), "text/plain"};
    return {200, "worker " + req.segments.at(0), "text/plain"};
  }

  QuickAnswer quick(const HttpRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    quick_on_network_ = quick_on_network_ && std::this_thread::get_id() == network_id_;
    const std::string& what = req.segments.at(0);
    if (what == "now") return {HttpReply{200, "quick now", "text/plain"}, nullptr};
    if (what == "later")
      return {std::nullopt, [this] {
                std::lock_guard<std::mutex> finishing(mu_);
                finish_ids_.insert(std::this_thread::get_id());
                return HttpReply{202, "finished on a worker", "text/plain"};
              }};
    if (what == "broken") throw std::runtime_error("a quick handler's own failure");
    return {};
  }

  std::string get(HttpConnection& c, const std::string& path, int status) {
    HttpResponse r = c.request("GET", path, "");
    EXPECT_EQ(r.status, status) << path << ": " << r.body;
    return r.body;
  }

  std::mutex mu_;
  std::thread::id network_id_;
  bool quick_on_network_ = true;
  std::set<std::thread::id> worker_ids_, finish_ids_;
  HttpServer server_;
  std::thread network_;
};

TEST_F(QuickServer, AnswersNowFinishesOnAWorkerOrLeavesTheRequestToTheWorkers) {
  HttpConnection c("127.0.0.1", server_.port(), "");
  for (int round = 0; round < 3; ++round) {  // one kept-alive connection through every path
    EXPECT_EQ(get(c, "/now", 200), "quick now");
    EXPECT_EQ(get(c, "/later", 202), "finished on a worker");
    EXPECT_EQ(get(c, "/other", 200), "worker other");
  }
  // A quick handler that throws is the server's failure (500), and the connection goes on.
  EXPECT_NE(get(c, "/broken", 500).find("internal"), std::string::npos);
  EXPECT_EQ(get(c, "/now", 200), "quick now");
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(quick_on_network_) << "the quick handler ran on a thread other than run()'s";
  EXPECT_FALSE(worker_ids_.empty());
  EXPECT_FALSE(finish_ids_.empty());
  EXPECT_FALSE(worker_ids_.count(network_id_));
  EXPECT_FALSE(finish_ids_.count(network_id_));
}

// A reply larger than the socket takes at once: the rest is written as the client reads, whole and
// in order; a client that stops reading is cut at the write deadline, while others are served.
TEST_F(QuickServer, AReplyTheSocketCannotTakeAtOnceIsWrittenAsReadOrCutAtTheDeadline) {
  HttpConnection reader("127.0.0.1", server_.port(), "");
  HttpResponse whole = reader.request("GET", "/big", "");
  EXPECT_EQ(whole.status, 200);
  EXPECT_TRUE(whole.body == bigBody()) << "a body of " << whole.body.size() << " bytes, not the one written";

  // A client that sends a request and never reads the reply.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int small = 16 * 1024;  // no autotuning up to tcp_rmem's maximum (32 MiB here): the reply must stall
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  const std::string request = "GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  HttpConnection other("127.0.0.1", server_.port(), "");
  EXPECT_EQ(get(other, "/now", 200), "quick now");  // the network thread is not held by the stalled reply
  EXPECT_EQ(get(other, "/other", 200), "worker other");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server_.stats().timeouts_write == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(server_.stats().timeouts_write, 1);
  close(fd);
}

}  // namespace
}  // namespace poolrun::pool
