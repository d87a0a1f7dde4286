#pragma once

// poold's own metrics in Prometheus's text format: API latency and responses by route, queue
// waits, what the connection layer refused, leases ended and GPU-seconds per owner, the build and
// the start time. The pool's gauges come from PoolStatus. And who may read /metrics besides the
// users: a scrape token and a list of addresses (MetricsAccess).

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "poolrun/common/regular_file.hpp"

#include "poolrun/pool/http_server.hpp"
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

// A label value as Prometheus's text format writes it: backslash, double quote and newline escaped.
std::string labelValue(std::string_view text);

class ServerMetrics {
 public:
  ServerMetrics();
  // `route` is a fixed label ("/v1/leases"), never a client's text.
  void observeRequest(const std::string& method, const std::string& route, int status, double seconds);
  void observeWaits(const std::vector<double>& seconds);
  // A lease that ended (released or expired; grants, growths and shrinks are ignored): counted.
  void observeLease(const LeaseEvent& event);
  // GPU-milliseconds per owner of the usage ledger (UsageLedger::allocatedByOwner: since the ledger
  // began, across restarts). Never less than a previous answer for an owner (a clock stepped back).
  std::map<std::string, int64_t> gpuMillis(const std::map<std::string, double, std::less<>>& ledger);
  std::string render(const PoolStatus& pool, const HttpServerStats& http,
                     const std::map<std::string, int64_t>& gpu_millis) const;
  // The usage ledger's other counters per owner (UsageLedger::totalsByOwner): GPU-seconds used and
  // joules. Never less than a previous answer for an owner.
  std::string renderUsage(const std::map<std::string, UsageTotals, std::less<>>& owners);
  // The process's series alone (poolrun_build_info, process_start_time_seconds), which render()
  // ends with: all a standby has of its own besides replicaSeries().
  std::string renderProcess() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Histogram> latency_;   // by labels
  std::map<std::string, uint64_t> responses_;  // by labels
  Histogram waits_;
  TimePoint start_;
  std::string version_;
  uint64_t releases_ = 0;
  uint64_t expiries_ = 0;
  std::map<std::string, int64_t> shown_millis_;                   // the last gpuMillis() answer, by owner
  std::map<std::string, std::pair<double, double>> shown_usage_;  // renderUsage's: used s, joules
};

struct EtcdMemberStatus;
class TokenStore;

// A replica's own series with --store etcd://, the same on the leader and a standby (Prometheus
// scrapes each, and tells them apart by `instance`): poolrun_leader (1 or 0) and what this replica
// sees of etcd's members (poolrun_etcd_member_up, poolrun_etcd_db_size_bytes by endpoint).
std::string replicaSeries(bool leading, const std::vector<EtcdMemberStatus>& etcd);

// An IPv4 or IPv6 prefix: "10.0.0.0/8", "::1/128", or one address ("127.0.0.1").
struct AddressRange {
  std::array<unsigned char, 16> bytes{};  // IPv4 in the first 4
  bool v6 = false;
  int prefix = 0;
  std::string text;
};

// Parses one address or prefix. Throws poolrun::Error (kBadInput) naming `text` and `option`.
AddressRange parseAddressRange(const std::string& text, const std::string& option);
// "A,B,C": each as parseAddressRange.
std::vector<AddressRange> parseAddressRanges(const std::string& list, const std::string& option);
// Whether `peer` (an address as the server writes it; IPv4-mapped IPv6 counts as IPv4) is in `range`.
bool addressIn(const std::string& peer, const AddressRange& range);

// The one token of a scrape token file, read as a client's token file (the first word of the first
// line that is not a comment). Throws poolrun::Error naming the file when there is none or it is
// not 8 to 512 printable characters.
std::string readScrapeToken(const std::filesystem::path& file);

// The names MetricsAccess takes as a request's Host besides IP addresses and localhost: `listen_host`
// (poold --listen), this machine's name (gethostname's, and its first label), and `more`.
std::vector<std::string> metricsHostNames(const std::string& listen_host, std::vector<std::string> more);

// Who may read /metrics without a user's token: a peer in the allowed ranges that names this poold
// in its Host header, or a request with the scrape token (the file is read again when it changes; a
// file that cannot be read keeps the token read before, with a warning).
class MetricsAccess {
 public:
  using Warn = std::function<void(const std::string&)>;
  // `names`: the host names a request from an allowed peer may send as its Host besides an IP
  // address and localhost (poold's --listen host, this machine's name, --advertise's host and
  // --metrics-host), compared without case.
  MetricsAccess(std::filesystem::path token_file, std::vector<AddressRange> allowed,
                std::vector<std::string> names, Warn warn);
  bool allowsPeer(const std::string& peer) const;
  // Whether `host` (a Host header: "head:7450", "[::1]:7450", empty where none was sent) names this
  // poold. A page of another site that a browser on an allowed address loads, its name rebound to
  // poold's address (DNS rebinding), sends its own name: its scripts may not read /metrics.
  bool allowsHost(const std::string& host) const;
  bool isScrapeToken(const std::string& token);

 private:
  std::filesystem::path file_;
  std::vector<AddressRange> allowed_;
  std::vector<std::string> names_;  // lower case, no trailing dot
  Warn warn_;
  std::mutex mu_;
  std::string token_;
  common::FileWatch watch_;
};

// The 403's message where an allowed address sends a Host that does not name this poold.
std::string hostNotPooldMessage(const std::string& host);

// GET /metrics on a standby, which has no PoolServer: the leader's access rules (a user's or
// administrator's token of `tokens`, the scrape token, an allowed peer whose Host names poold; 401
// or 403 otherwise, as the leader says them) and `series` (the standby's own: no pool series,
// which are the leader's alone) for those it lets in.
HttpReply standbyMetricsReply(const HttpRequest& req, MetricsAccess& access, TokenStore& tokens,
                              const std::function<std::string()>& series);

}  // namespace poolrun::pool
