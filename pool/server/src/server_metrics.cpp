#include "poolrun/pool/server_metrics.hpp"
#include "poolrun/pool/client.hpp"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "poolrun/common/names.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/pool/etcd_client.hpp"
#include "poolrun/pool/tokens.hpp"
#include "poolrun/topo/version.hpp"

namespace poolrun::pool {
namespace {

const std::vector<double> kLatencyBounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                         0.01,   0.025,   0.05,   0.1,   0.25,   1};
const std::vector<double> kWaitBounds{0.1, 1, 10, 60, 600, 3600};

void gauge(std::ostream& out, const char* name, const char* help, const char* type) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

// Milliseconds as seconds with three decimals, exactly ("12.345").
std::string millisText(int64_t ms) {
  std::ostringstream out;
  out << (ms < 0 ? "-" : "") << std::abs(ms / 1000) << "." << std::setw(3) << std::setfill('0')
      << std::abs(ms % 1000);
  return out.str();
}

int64_t millisOf(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// "0.1.0" of "poolrun 0.1.0\nbuilt with: ...".
std::string projectVersion() {
  std::string text = topo::versionText("poolrun");
  std::string first = text.substr(0, text.find('\n'));
  size_t space = first.find(' ');
  return space == std::string::npos ? first : first.substr(space + 1);
}

// Compares without stopping at the first difference, so that the time taken says nothing of
// how much of a guess was right.
bool sameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff = static_cast<unsigned char>(diff |
                                      (static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i])));
  return diff == 0;
}

// An address in 16 bytes (IPv4 in the first 4); false where `text` is none. IPv4-mapped IPv6
// addresses (::ffff:10.1.2.3, what a dual-stack socket reports) are IPv4.
bool parseAddress(const std::string& text, std::array<unsigned char, 16>& bytes, bool& v6) {
  bytes.fill(0);
  if (inet_pton(AF_INET, text.c_str(), bytes.data()) == 1) {
    v6 = false;
    return true;
  }
  if (inet_pton(AF_INET6, text.c_str(), bytes.data()) != 1) return false;
  static const unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  v6 = !std::equal(bytes.begin(), bytes.begin() + 12, kMapped);
  if (!v6) {
    std::copy(bytes.begin() + 12, bytes.end(), bytes.begin());
    std::fill(bytes.begin() + 4, bytes.end(), 0);
  }
  return true;
}

bool samePrefix(const std::array<unsigned char, 16>& a, const std::array<unsigned char, 16>& b, int prefix) {
  for (int bit = 0; bit < prefix; ++bit) {
    auto byte = static_cast<size_t>(bit / 8);
    auto mask = static_cast<unsigned char>(0x80 >> (bit % 8));
    if ((a[byte] & mask) != (b[byte] & mask)) return false;
  }
  return true;
}

}  // namespace

std::string labelValue(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

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

ServerMetrics::ServerMetrics()
    : waits_(kWaitBounds), start_(std::chrono::system_clock::now()), version_(projectVersion()) {}

void ServerMetrics::observeLease(const LeaseEvent& event) {
  using Kind = LeaseEvent::Kind;
  if (event.kind != Kind::kReleased && event.kind != Kind::kExpired) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++(event.kind == Kind::kExpired ? expiries_ : releases_);
}

std::map<std::string, int64_t> ServerMetrics::gpuMillis(
    const std::map<std::string, double, std::less<>>& ledger) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int64_t> out;
  for (const auto& [owner, seconds] : ledger) {
    int64_t& shown = shown_millis_[owner];
    shown = std::max(shown, static_cast<int64_t>(std::llround(seconds * 1000)));
    out[owner] = shown;
  }
  return out;
}

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

std::string ServerMetrics::render(const PoolStatus& s, const HttpServerStats& h,
                                  const std::map<std::string, int64_t>& gpuMillis) const {
  std::ostringstream out;
  gauge(out, "poolrun_gpus",
        "GPUs in the pool by state (unreachable: on nodes whose agent is silent, also counted in their own).",
        "gauge");
  out << "poolrun_gpus{state=\"free\"} " << s.gpus_free << "\n";
  out << "poolrun_gpus{state=\"leased\"} " << s.gpus_leased << "\n";
  out << "poolrun_gpus{state=\"failed\"} " << s.gpus_failed << "\n";
  out << "poolrun_gpus{state=\"foreign\"} " << s.gpus_foreign << "\n";
  out << "poolrun_gpus{state=\"mig\"} " << s.gpus_mig << "\n";
  out << "poolrun_gpus{state=\"unreachable\"} " << s.gpus_unreachable << "\n";
  gauge(out, "poolrun_mig_instances",
        "MIG compute instances of GPUs in MIG mode by state (unusable: their GPU failed or busy outside the "
        "pool).",
        "gauge");
  out << "poolrun_mig_instances{state=\"free\"} " << s.mig_free << "\n";
  out << "poolrun_mig_instances{state=\"leased\"} " << s.mig_leased << "\n";
  out << "poolrun_mig_instances{state=\"unusable\"} " << s.mig_unusable << "\n";
  gauge(out, "poolrun_mps_gpus", "GPUs shared through MPS (counted as leased in poolrun_gpus).", "gauge");
  out << "poolrun_mps_gpus " << s.gpus_shared << "\n";
  gauge(out, "poolrun_mps_shares", "MPS shares leased, on the GPUs of poolrun_mps_gpus.", "gauge");
  out << "poolrun_mps_shares " << s.mps_shares << "\n";
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
  out << "poolrun_http_timeouts_total{phase=\"handshake\"} " << h.timeouts_handshake << "\n";
  gauge(out, "poolrun_http_bad_requests_total", "Malformed HTTP requests (400, 413, 431).", "counter");
  out << "poolrun_http_bad_requests_total " << h.bad_requests << "\n";
  gauge(out, "poolrun_tls_handshake_failures_total",
        "TLS handshakes that failed (a certificate refused, not TLS) and plain-HTTP requests to HTTPS "
        "(kind=\"plain_http\").",
        "counter");
  out << "poolrun_tls_handshake_failures_total{kind=\"handshake\"} " << h.tls_failures << "\n";
  out << "poolrun_tls_handshake_failures_total{kind=\"plain_http\"} " << h.plain_on_tls << "\n";
  if (h.tls_not_after != 0) {
    gauge(out, "poolrun_tls_certificate_expiry_seconds",
          "When the certificate poold serves expires (seconds since 1970): alert a few weeks before.",
          "gauge");
    out << "poolrun_tls_certificate_expiry_seconds " << h.tls_not_after << "\n";
  }
  std::lock_guard<std::mutex> lock(mu_);
  gauge(out, "poolrun_queue_wait_seconds", "Time from a request's arrival to its lease.", "histogram");
  waits_.write(out, "poolrun_queue_wait_seconds", "");
  gauge(out, "poolrun_request_duration_seconds", "Time to answer an API request, commit included.",
        "histogram");
  for (const auto& [labels, hist] : latency_) hist.write(out, "poolrun_request_duration_seconds", labels);
  gauge(out, "poolrun_responses_total", "API responses by route and status.", "counter");
  for (const auto& [labels, n] : responses_) out << "poolrun_responses_total{" << labels << "} " << n << "\n";
  gauge(out, "poolrun_lease_releases_total", "Leases released since poold started.", "counter");
  out << "poolrun_lease_releases_total " << releases_ << "\n";
  gauge(out, "poolrun_lease_expiries_total",
        "Leases ended since poold started because they were not renewed within their ttl (their client "
        "died or lost poold) or reached their maximum duration.",
        "counter");
  out << "poolrun_lease_expiries_total " << expiries_ << "\n";
  gauge(out, "poolrun_gpu_seconds_total",
        "GPU-seconds held by each owner's leases, those still held included, from the usage ledger (kept "
        "across restarts and failovers).",
        "counter");
  for (const auto& [owner, ms] : gpuMillis)
    out << "poolrun_gpu_seconds_total{owner=\"" << labelValue(owner) << "\"} " << millisText(ms) << "\n";
  return out.str() + renderProcess();
}

std::string ServerMetrics::renderUsage(const std::map<std::string, UsageTotals, std::less<>>& owners) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [owner, t] : owners) {
    auto& [used, joules] = shown_usage_[owner];
    used = std::max(used, t.used_s);
    joules = std::max(joules, t.energy_j);
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(3);
  gauge(out, "poolrun_gpu_used_seconds_total",
        "GPU-seconds each owner's leases computed (utilisation integrated), from the usage ledger.",
        "counter");
  for (const auto& [owner, v] : shown_usage_)
    out << "poolrun_gpu_used_seconds_total{owner=\"" << labelValue(owner) << "\"} " << v.first << "\n";
  gauge(out, "poolrun_gpu_energy_joules_total",
        "Energy the GPUs of each owner's leases drew, from the usage ledger (NVML's energy counter).",
        "counter");
  for (const auto& [owner, v] : shown_usage_)
    out << "poolrun_gpu_energy_joules_total{owner=\"" << labelValue(owner) << "\"} " << v.second << "\n";
  return out.str();
}

std::string ServerMetrics::renderProcess() const {
  std::ostringstream out;
  gauge(out, "poolrun_build_info", "poold's version; the value is 1.", "gauge");
  out << "poolrun_build_info{version=\"" << labelValue(version_) << "\"} 1\n";
  gauge(out, "process_start_time_seconds", "When poold started, in seconds since the Unix epoch.", "gauge");
  out << "process_start_time_seconds " << millisText(millisOf(start_)) << "\n";
  return out.str();
}

std::string replicaSeries(bool leading, const std::vector<EtcdMemberStatus>& etcd) {
  std::ostringstream out;
  gauge(out, "poolrun_leader",
        "Whether this poold replica leads the pool: 1 on the leader, 0 on a standby (which exports only "
        "its own series; the pool's are the leader's).",
        "gauge");
  out << "poolrun_leader " << (leading ? 1 : 0) << "\n";
  gauge(out, "poolrun_etcd_member_up", "Whether the etcd member answered this replica's status request.",
        "gauge");
  for (const EtcdMemberStatus& m : etcd)
    out << "poolrun_etcd_member_up{endpoint=\"" << labelValue(m.endpoint) << "\"} " << (m.reachable ? 1 : 0)
        << "\n";
  gauge(out, "poolrun_etcd_db_size_bytes", "The etcd member's database size, as it reports it.", "gauge");
  for (const EtcdMemberStatus& m : etcd)
    if (m.reachable)
      out << "poolrun_etcd_db_size_bytes{endpoint=\"" << labelValue(m.endpoint) << "\"} " << m.db_size
          << "\n";
  return out.str();
}

std::string hostNotPooldMessage(const std::string& host) {
  return "/metrics without a token answers a --metrics-allow address only where the request's Host names "
         "this poold (an IP address, localhost, its --listen host, this machine's name or a --metrics-host), "
         "not '" +
         common::printable(host.substr(0, 200)) +
         "' (a page of another site could read it so): scrape by one of those, or add the name with poold "
         "--metrics-host";
}

HttpReply standbyMetricsReply(const HttpRequest& req, MetricsAccess& access, TokenStore& tokens,
                              const std::function<std::string()>& series) {
  auto refuse = [](std::string_view reason, const std::string& message) {
    HttpReply r = refusal(reason, message);
    if (r.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"poold\"");
    return r;
  };
  if (req.method != "GET")
    return refuse("method_not_allowed", "/metrics takes GET, not " + common::printable(req.method));
  bool allowed = access.allowsPeer(req.peer) && access.allowsHost(req.host);
  if (!allowed && access.allowsPeer(req.peer) && req.authorization.empty())
    return refuse("forbidden", hostNotPooldMessage(req.host));
  const std::string prefix = "Bearer ";
  if (!allowed) {
    if (req.authorization.rfind(prefix, 0) != 0 || req.authorization.size() == prefix.size())
      return refuse("unauthorized", "no bearer token (send `Authorization: Bearer TOKEN`)");
    const std::string token = req.authorization.substr(prefix.size());
    if (!tokens.find(token) && !access.isScrapeToken(token))
      return refuse("unauthorized", "the token sent is not in poold's token file");
  }
  return {200, series(), "text/plain; version=0.0.4"};
}

AddressRange parseAddressRange(const std::string& text, const std::string& option) {
  auto bad = [&](const std::string& why) {
    return badInput(option + " '" + common::printable(text) + "': " + why +
                    " (give IPv4 or IPv6 addresses or prefixes, e.g. 10.0.0.0/8, 127.0.0.1/32, ::1/128)");
  };
  AddressRange r;
  r.text = text;
  const size_t slash = text.find('/');
  const std::string address = text.substr(0, slash);
  std::array<unsigned char, 16> raw{};
  if (inet_pton(AF_INET, address.c_str(), raw.data()) != 1 &&
      inet_pton(AF_INET6, address.c_str(), raw.data()) != 1)
    throw bad("'" + common::printable(address) + "' is not an IP address");
  parseAddress(address, r.bytes, r.v6);
  const bool mapped = !r.v6 && address.find(':') != std::string::npos;  // ::ffff:a.b.c.d
  const int most = r.v6 || mapped ? 128 : 32;
  r.prefix = most;
  if (slash != std::string::npos) {
    const std::string length = text.substr(slash + 1);
    int v = -1;
    auto [p, ec] = std::from_chars(length.data(), length.data() + length.size(), v);
    if (length.empty() || ec != std::errc() || p != length.data() + length.size() || v < 0 || v > most)
      throw bad("prefix length '" + common::printable(length) + "' is not a number from 0 to " +
                std::to_string(most));
    r.prefix = v;
  }
  if (mapped) {
    if (r.prefix < 96) throw bad("an IPv4-mapped prefix needs a length of at least 96");
    r.prefix -= 96;
  }
  std::array<unsigned char, 16> network{};
  for (int bit = 0; bit < r.prefix; ++bit) {
    auto byte = static_cast<size_t>(bit / 8);
    network[byte] = static_cast<unsigned char>(network[byte] | (r.bytes[byte] & (0x80 >> (bit % 8))));
  }
  if (network != r.bytes) {
    char shown[INET6_ADDRSTRLEN] = {};
    inet_ntop(r.v6 ? AF_INET6 : AF_INET, network.data(), shown, sizeof shown);
    throw bad("the address has bits set past its /" + std::to_string(r.prefix) + " prefix (did you mean " +
              shown + "/" + std::to_string(r.prefix) + "?)");
  }
  return r;
}

std::vector<AddressRange> parseAddressRanges(const std::string& list, const std::string& option) {
  std::vector<AddressRange> out;
  for (size_t start = 0; start <= list.size();) {
    size_t end = std::min(list.find(',', start), list.size());
    std::string item = list.substr(start, end - start);
    if (item.empty())
      throw badInput(option + " '" + common::printable(list) + "': an empty address in the list");
    out.push_back(parseAddressRange(item, option));
    start = end + 1;
  }
  return out;
}

bool addressIn(const std::string& peer, const AddressRange& range) {
  std::array<unsigned char, 16> bytes{};
  bool v6 = false;
  if (!parseAddress(peer.substr(0, peer.find('%')), bytes, v6) || v6 != range.v6) return false;
  return samePrefix(bytes, range.bytes, range.prefix);
}

std::string readScrapeToken(const std::filesystem::path& file) {
  return readClientToken(file, "the scrape token");  // checked as a client's token
}

namespace {

// A host name as compared: lower case, without the trailing dot of a fully qualified name.
std::string hostKey(std::string name) {
  name = common::lower(name);
  while (!name.empty() && name.back() == '.') name.pop_back();
  return name;
}

}  // namespace

std::vector<std::string> metricsHostNames(const std::string& listen_host, std::vector<std::string> more) {
  more.push_back(listen_host);
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') {
    more.emplace_back(name);
    more.push_back(std::string(name).substr(0, std::string(name).find('.')));
  }
  return more;
}

MetricsAccess::MetricsAccess(std::filesystem::path token_file, std::vector<AddressRange> allowed,
                             std::vector<std::string> names, Warn warn)
    : file_(std::move(token_file)), allowed_(std::move(allowed)), warn_(std::move(warn)) {
  for (const std::string& n : names)
    if (!n.empty()) names_.push_back(hostKey(n));
  if (file_.empty()) return;
  struct stat st {};
  const bool stated = stat(file_.c_str(), &st) == 0;
  token_ = readScrapeToken(file_);
  if (stated) watch_ = common::FileWatch(common::identityOf(st));
}

bool MetricsAccess::allowsPeer(const std::string& peer) const {
  for (const AddressRange& r : allowed_)
    if (addressIn(peer, r)) return true;
  return false;
}

bool MetricsAccess::allowsHost(const std::string& host) const {
  if (host.empty()) return true;  // HTTP/1.0 without one; a browser always sends it
  std::string name = host;
  if (name.front() == '[') {  // [v6]:port
    const size_t close = name.find(']');
    if (close == std::string::npos) return false;
    const std::string rest = name.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    name = name.substr(1, close - 1);
    in6_addr a6{};
    return inet_pton(AF_INET6, name.c_str(), &a6) == 1;
  }
  if (const size_t colon = name.find(':'); colon != std::string::npos) name.resize(colon);
  in_addr a4{};
  if (inet_pton(AF_INET, name.c_str(), &a4) == 1) return true;
  name = hostKey(name);
  if (name == "localhost") return true;
  for (const std::string& n : names_)
    if (n == name) return true;
  return false;
}

bool MetricsAccess::isScrapeToken(const std::string& token) {
  if (file_.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  try {
    if (std::optional<std::string> now =
            watch_.readIfChanged(file_, [this] { return readScrapeToken(file_); }))
      token_ = std::move(*now);
  } catch (const Error& e) {
    warn_(std::string("keeping the previous scrape token: ") + e.what());
  }
  return sameToken(token, token_);
}

}  // namespace poolrun::pool
