// HttpServer's quick path: what the network thread answers itself (a reply now, or work finished
// on a worker) and what it leaves to the workers, over real connections on 127.0.0.1.

#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "http_connection.hpp"
#include "http_server.hpp"

namespace poolrun::pool {
namespace {

class QuickServer : public ::testing::Test {
 protected:
  QuickServer()
      : server_(
            HttpServerOptions{}, [this](const HttpRequest& req) { return onWorker(req); },
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

  HttpReply onWorker(const HttpRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    worker_ids_.insert(std::this_thread::get_id());
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

}  // namespace
}  // namespace poolrun::pool
