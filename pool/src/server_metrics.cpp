#include "server_metrics.hpp"

#include <sstream>

namespace poolrun::pool {
namespace {

const std::vector<double> kLatencyBounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                         0.01,   0.025,   0.05,   0.1,   0.25,   1};
const std::vector<double> kWaitBounds{0.1, 1, 10, 60, 600, 3600};

void gauge(std::ostream& out, const char* name, const char* help, const char* type) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::write(std::ostream& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out << name << "_bucket{" << labels << sep << "le=\"" << bounds_[i] << "\"} " << cumulative << "\n";
  }
  cumulative += counts_.back();
  out << name << "_bucket{" << labels << sep << "le=\"+Inf\"} " << cumulative << "\n";
  out << name << "_sum" << (labels.empty() ? "" : "{" + labels + "}") << " " << sum_ << "\n";
  out << name << "_count" << (labels.empty() ? "" : "{" + labels + "}") << " " << count_ << "\n";
}

ServerMetrics::ServerMetrics() : waits_(kWaitBounds) {}

void ServerMetrics::observeRequest(const std::string& method, const std::string& route, int status,
                                   double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  latency_.try_emplace("method=\"" + method + "\",route=\"" + route + "\"", kLatencyBounds)
      .first->second.observe(seconds);
  ++responses_["route=\"" + route + "\",code=\"" + std::to_string(status) + "\""];
}

void ServerMetrics::observeWaits(const std::vector<double>& seconds) {
  if (seconds.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (double w : seconds) waits_.observe(w);
}

std::string ServerMetrics::render(const PoolStatus& s, const HttpServerStats& h) const {
  std::ostringstream out;
  gauge(out, "poolrun_gpus",
        "GPUs in the pool by state (unreachable: on nodes whose agent is silent, also counted in their own).",
        "gauge");
  out << "poolrun_gpus{state=\"free\"} " << s.gpus_free << "\n";
  out << "poolrun_gpus{state=\"leased\"} " << s.gpus_leased << "\n";
  out << "poolrun_gpus{state=\"failed\"} " << s.gpus_failed << "\n";
  out << "poolrun_gpus{state=\"foreign\"} " << s.gpus_foreign << "\n";
  out << "poolrun_gpus{state=\"unreachable\"} " << s.gpus_unreachable << "\n";
  gauge(out, "poolrun_nodes", "Nodes in the pool by state.", "gauge");
  out << "poolrun_nodes{state=\"up\"} " << s.nodes_up << "\n";
  out << "poolrun_nodes{state=\"draining\"} " << s.nodes_draining << "\n";
  out << "poolrun_nodes{state=\"down\"} " << s.nodes_down << "\n";
  out << "poolrun_nodes{state=\"unreachable\"} " << s.nodes_unreachable << "\n";
  gauge(out, "poolrun_leases", "Leases held now.", "gauge");
  out << "poolrun_leases " << s.leases << "\n";
  gauge(out, "poolrun_leases_granted_total", "Leases granted since the pool was created.", "counter");
  out << "poolrun_leases_granted_total " << s.leases_granted << "\n";
  gauge(out, "poolrun_queue_length", "Requests waiting.", "gauge");
  out << "poolrun_queue_length " << s.queued << "\n";
  gauge(out, "poolrun_http_connections", "HTTP connections open now.", "gauge");
  out << "poolrun_http_connections " << h.open << "\n";
  gauge(out, "poolrun_http_connections_accepted_total", "HTTP connections accepted since start.", "counter");
  out << "poolrun_http_connections_accepted_total " << h.accepted << "\n";
  gauge(out, "poolrun_http_connections_refused_total",
        "Connections closed at once: too many open (limit=\"total\") or from one address (limit=\"peer\").",
        "counter");
  out << "poolrun_http_connections_refused_total{limit=\"total\"} " << h.refused_total << "\n";
  out << "poolrun_http_connections_refused_total{limit=\"peer\"} " << h.refused_peer << "\n";
  gauge(out, "poolrun_http_timeouts_total", "Connections closed past a deadline, by phase.", "counter");
  out << "poolrun_http_timeouts_total{phase=\"idle\"} " << h.timeouts_idle << "\n";
  out << "poolrun_http_timeouts_total{phase=\"header\"} " << h.timeouts_header << "\n";
  out << "poolrun_http_timeouts_total{phase=\"body\"} " << h.timeouts_body << "\n";
  out << "poolrun_http_timeouts_total{phase=\"write\"} " << h.timeouts_write << "\n";
  gauge(out, "poolrun_http_bad_requests_total", "Malformed HTTP requests (400, 413, 431).", "counter");
  out << "poolrun_http_bad_requests_total " << h.bad_requests << "\n";
  std::lock_guard<std::mutex> lock(mu_);
  gauge(out, "poolrun_queue_wait_seconds", "Time from a request's arrival to its lease.", "histogram");
  waits_.write(out, "poolrun_queue_wait_seconds", "");
  gauge(out, "poolrun_request_duration_seconds", "Time to answer an API request, commit included.",
        "histogram");
  for (const auto& [labels, hist] : latency_) hist.write(out, "poolrun_request_duration_seconds", labels);
  gauge(out, "poolrun_responses_total", "API responses by route and status.", "counter");
  for (const auto& [labels, n] : responses_) out << "poolrun_responses_total{" << labels << "} " << n << "\n";
  return out.str();
}

}  // namespace poolrun::pool
