#pragma once

// poold's own metrics in Prometheus's text format: API latency and responses by route, queue
// waits, and what the connection layer refused. The pool's gauges come from PoolStatus.

#include <cstdint>
#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "http_server.hpp"
#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

// A histogram with fixed bucket bounds.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  void write(std::ostream& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  // `route` is a fixed label ("/v1/leases"), never a client's text.
  void observeRequest(const std::string& method, const std::string& route, int status, double seconds);
  void observeWaits(const std::vector<double>& seconds);
  std::string render(const PoolStatus& pool, const HttpServerStats& http) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Histogram> latency_;   // by labels
  std::map<std::string, uint64_t> responses_;  // by labels
  Histogram waits_;
};

}  // namespace poolrun::pool
