#include "poolrun/pool/etcd_client.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "poolrun/common/error.hpp"
#include "poolrun/common/http_connection.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/common/text.hpp"
#include "poolrun/common/tls_client.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kBase64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The password of --etcd-password-file: its first line, the file guarded as a token file is.
std::string readPassword(const std::string& file) {
  const std::string text = common::readSecretFile(file, 4096, "password files", nullptr, nullptr, "password");
  std::string line(common::trim(text.substr(0, text.find('\n'))));
  if (line.empty()) throw badInput(file + ": no password on its first line");
  // Sent in a JSON document: control characters and bytes that are not UTF-8 cannot be.
  if (common::utf8ErrorOffset(line) != line.size() || std::any_of(line.begin(), line.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      }))
    throw badInput(file +
                   ": its password holds control characters or bytes that are not UTF-8; etcd's "
                   "passwords are text (etcdctl user passwd NAME)");
  return line;
}

Error badUri(const std::string& uri, const std::string& why) {
  return badInput("bad etcd URI '" + uri + "': " + why +
                  " (use etcd://HOST:PORT[,HOST:PORT...], or etcds://... for TLS)");
}

// The gateway writes int64 as strings; an absent field is 0.
int64_t number(const json& doc, const char* field) {
  auto it = doc.find(field);
  if (it == doc.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string())
    throw Error(ErrorCode::kIo, std::string("etcd reply: field '") + field + "' is not a number");
  const std::string& s = it->get_ref<const std::string&>();
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    throw Error(ErrorCode::kIo,
                std::string("etcd reply: field '") + field + "' is '" + s + "', not a number");
  return v;
}

EtcdKeyValue keyValue(const json& doc) {
  EtcdKeyValue kv;
  kv.key = base64Decode(doc.value("key", ""));
  kv.value = base64Decode(doc.value("value", ""));
  kv.create_revision = number(doc, "create_revision");
  kv.mod_revision = number(doc, "mod_revision");
  kv.version = number(doc, "version");
  kv.lease = number(doc, "lease");
  return kv;
}

std::vector<EtcdKeyValue> keyValues(const json& reply) {
  std::vector<EtcdKeyValue> out;
  if (auto it = reply.find("kvs"); it != reply.end() && it->is_array())
    for (const json& kv : *it) out.push_back(keyValue(kv));
  return out;
}

json opJson(const EtcdOp& op) {
  switch (op.kind) {
    case EtcdOp::Kind::kPut: {
      json put = {{"key", base64Encode(op.key)}, {"value", base64Encode(op.value)}};
      if (op.lease != 0) put["lease"] = std::to_string(op.lease);
      return {{"request_put", put}};
    }
    case EtcdOp::Kind::kDelete: {
      json del = {{"key", base64Encode(op.key)}};
      if (!op.range_end.empty()) del["range_end"] = base64Encode(op.range_end);
      return {{"request_delete_range", del}};
    }
    case EtcdOp::Kind::kRange: {
      json range = {{"key", base64Encode(op.key)}};
      if (!op.range_end.empty()) range["range_end"] = base64Encode(op.range_end);
      return {{"request_range", range}};
    }
  }
  return json::object();
}

json compareJson(const EtcdCompare& c) {
  static const char* targets[] = {"CREATE", "MOD", "VERSION", "LEASE", "VALUE"};
  static const char* results[] = {"EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
  static const char* fields[] = {"create_revision", "mod_revision", "version", "lease", "value"};
  json out = {{"key", base64Encode(c.key)},
              {"target", targets[static_cast<int>(c.target)]},
              {"result", results[static_cast<int>(c.result)]}};
  const char* field = fields[static_cast<int>(c.target)];
  if (c.target == EtcdCompare::Target::kValue)
    out[field] = base64Encode(c.value);
  else
    out[field] = std::to_string(c.number);
  return out;
}

}  // namespace

std::string base64Encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v =
        (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += kBase64[v & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64Decode(const std::string& text) {
  auto value = [&](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0)
    throw Error(ErrorCode::kIo, "etcd reply: '" + text.substr(0, 40) + "' is not base64 (length " +
                                    std::to_string(text.size()) + ")");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int pad = (text[i + 3] == '=') + (text[i + 2] == '=');
    if (pad > 0 && i + 4 != text.size())
      throw Error(ErrorCode::kIo, "etcd reply: '" + text.substr(0, 40) + "' is not base64 (padding inside)");
    uint32_t v = 0;
    for (int j = 0; j < 4; ++j) {
      int d = j >= 4 - pad ? 0 : value(text[i + static_cast<size_t>(j)]);
      if (d < 0)
        throw Error(ErrorCode::kIo, "etcd reply: '" + text.substr(0, 40) + "' is not base64 (byte " +
                                        std::to_string(i + static_cast<size_t>(j)) + ")");
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

std::vector<EtcdEndpoint> parseEtcdUri(const std::string& uri) {
  const bool tls = uri.starts_with("etcds://");
  if (!tls && !uri.starts_with("etcd://")) throw badUri(uri, "it does not start with etcd:// or etcds://");
  std::vector<EtcdEndpoint> out;
  std::string rest = uri.substr(tls ? 8 : 7);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty()) throw badUri(uri, std::string("no HOST:PORT after ") + (tls ? "etcds://" : "etcd://"));
  for (size_t start = 0; start <= rest.size();) {
    size_t end = std::min(rest.find(',', start), rest.size());
    std::string part = rest.substr(start, end - start);
    size_t colon = part.rfind(':');
    if (colon == std::string::npos || colon == 0) throw badUri(uri, "'" + part + "' is not HOST:PORT");
    std::string host = part.substr(0, colon), portText = part.substr(colon + 1);
    if (host.find_first_of("/@?# ") != std::string::npos)
      throw badUri(uri, "'" + host + "' is not a host name or address");
    int port = 0;
    auto [p, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
    if (ec != std::errc() || p != portText.data() + portText.size() || port < 1 || port > 65535)
      throw badUri(uri, "port '" + portText + "' is not a number from 1 to 65535");
    out.push_back({host, port, tls});
    start = end + 1;
  }
  return out;
}

EtcdClient::EtcdClient(std::vector<EtcdEndpoint> endpoints, milliseconds timeout, EtcdSecurity security)
    : endpoints_(std::move(endpoints)), timeout_(timeout), security_(std::move(security)) {
  if (endpoints_.empty()) throw badInput("no etcd endpoint given");
  std::shared_ptr<const SecureTransport> tls;
  if (endpoints_.front().tls || security_.tls())
    tls = common::tlsClient({security_.ca_file, security_.cert_file, security_.key_file});
  if (!security_.user.empty() && security_.password_file.empty())
    throw badInput("--etcd-user " + security_.user +
                   " without --etcd-password-file: give the file of its password");
  if (!security_.password_file.empty())
    readPassword(security_.password_file);  // refused now, not at first use
  for (const EtcdEndpoint& e : endpoints_) {
    connections_.push_back(std::make_unique<HttpConnection>(e.host, e.port, "", tls));
    connections_.back()->connect_timeout = std::min(timeout_, milliseconds(1000));
    connections_.back()->io_timeout = timeout_;
  }
}

EtcdClient::~EtcdClient() = default;

void EtcdClient::authenticate(HttpConnection& c, const EtcdEndpoint& at) {
  const json req = {{"name", security_.user}, {"password", readPassword(security_.password_file)}};
  c.setAuthorization("");
  HttpResponse r = c.request("POST", "/v3/auth/authenticate", req.dump());
  std::string message = r.body.substr(0, 300);
  try {
    json doc = json::parse(r.body);
    if (r.status == 200 && doc.contains("token") && doc["token"].is_string()) {
      auth_token_ = doc["token"].get<std::string>();
      // A token one member issued is good at every member (etcd replicates it).
      for (auto& each : connections_) each->setAuthorization(auth_token_);
      return;
    }
    message = doc.value("message", doc.value("error", message));
  } catch (const json::exception&) {
  }
  throw Error(ErrorCode::kIo, "etcd " + at.text() + " refused to authenticate user " + security_.user + ": " +
                                  refusalText(message));
}

std::string EtcdClient::refusalText(const std::string& message) const {
  if (message.find("user name is empty") != std::string::npos)
    return message + " (etcd's authentication is on: give poold --etcd-user NAME --etcd-password-file FILE)";
  if (message.find("authentication failed") != std::string::npos)
    return message + " (wrong user or password: check --etcd-user " + security_.user +
           " and --etcd-password-file " + security_.password_file + ")";
  if (message.find("permission denied") != std::string::npos)
    return message + " (etcd user " + (security_.user.empty() ? std::string("(none)") : security_.user) +
           " may not use these keys: `etcdctl role grant-permission ROLE --prefix=true readwrite PREFIX`, "
           "PREFIX poold's --etcd-prefix)";
  if (message.find("CommonName of client") != std::string::npos)
    return message + " (with etcd's authentication on, poold's etcd client certificate (--etcd-cert " +
           security_.cert_file +
           ") must have no CommonName, e.g. subject /O=poolrun/OU=poold: etcd's JSON gateway refuses one)";
  return message;
}

std::string EtcdClient::endpointsText() const {
  std::string out;
  for (const EtcdEndpoint& e : endpoints_) out += (out.empty() ? "" : ",") + e.text();
  return out;
}

std::string EtcdClient::prefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// Tries the current endpoint, then the others, until one answers or the timeout passes. An
// endpoint that cannot be reached, or says it has no leader (or timed out inside etcd), hands the
// call to the next one; a call that may have been applied is retried only where `idempotent`.
std::string EtcdClient::call(const std::string& path, const std::string& body, bool idempotent) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = Steady::now() + timeout_;
  std::map<size_t, std::string> failures;
  bool reauthenticated = false;
  for (size_t attempt = 0;; ++attempt) {
    const EtcdEndpoint& at = endpoints_[current_];
    HttpConnection& c = *connections_[current_];
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Steady::now());
    c.io_timeout = std::max(left, milliseconds(100));
    std::string failed;
    bool unknown = false;
    try {
      if (!security_.user.empty() && auth_token_.empty()) authenticate(c, at);
      HttpResponse r = c.request("POST", path, body);
      if (r.status == 200) return r.body;
      std::string message = r.body.substr(0, 300);
      try {
        json doc = json::parse(r.body);
        message = doc.value("message", doc.value("error", message));
      } catch (const json::exception&) {
      }
      // An expired token (--auth-token-ttl): etcd refused the call before applying it, so it is
      // made again once with a new token, whatever it was.
      if (r.status == 401 && !security_.user.empty() && !reauthenticated) {
        reauthenticated = true;
        auth_token_.clear();
        authenticate(c, at);
        continue;
      }
      // The gateway's gRPC codes: 14 unavailable (no leader, member stopping), 4 deadline.
      bool retry = r.status == 503 || r.status == 504 || message.find("no leader") != std::string::npos ||
                   message.find("timed out") != std::string::npos;
      if (!retry)
        throw Error(ErrorCode::kIo, "etcd " + at.text() + " refused " + path + ": " + refusalText(message));
      failed = "HTTP " + std::to_string(r.status) + ": " + message;
      unknown = !idempotent && message.find("timed out") != std::string::npos;
    } catch (const HttpFailed& e) {
      // A certificate refused: no other member will take it either, and waiting will not cure it.
      if (e.kind() == HttpFailed::Kind::kRefused)
        throw Error(ErrorCode::kIo,
                    "etcd " + at.text() + ": " + e.what() + " (poold --etcd-ca, --etcd-cert, --etcd-key)");
      failed = e.what();
      unknown = !idempotent && e.kind() == HttpFailed::Kind::kTransfer;
    }
    failures[current_] = failed;  // the last failure of each endpoint
    if (unknown)
      throw EtcdOutcomeUnknown("etcd " + at.text() + ": " + path + " outcome unknown (" + failed +
                               "): it may or may not have been applied");
    current_ = (current_ + 1) % endpoints_.size();
    if (Steady::now() >= deadline) {
      std::string each;
      for (const auto& [i, why] : failures)
        each += (each.empty() ? "" : "; ") + endpoints_[i].text() + ": " + why;
      throw Error(ErrorCode::kIo, "etcd cluster " + endpointsText() + " did not answer " + path + " within " +
                                      std::to_string(timeout_.count()) + " ms (" + each +
                                      "); check that a majority of its members run and reach each other");
    }
    // After a round of every endpoint, wait a little: an election in etcd takes about a second.
    if ((attempt + 1) % endpoints_.size() == 0) std::this_thread::sleep_for(milliseconds(100));
  }
}

std::vector<EtcdKeyValue> EtcdClient::range(const std::string& key, const std::string& range_end,
                                            int64_t* revision) {
  json req = {{"key", base64Encode(key)}};
  if (!range_end.empty()) req["range_end"] = base64Encode(range_end);
  json reply = json::parse(call("/v3/kv/range", req.dump(), true));
  if (revision) *revision = number(reply.value("header", json::object()), "revision");
  return keyValues(reply);
}

int64_t EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  json req = {{"key", base64Encode(key)}, {"value", base64Encode(value)}};
  if (lease != 0) req["lease"] = std::to_string(lease);
  json reply = json::parse(call("/v3/kv/put", req.dump(), false));
  return number(reply.value("header", json::object()), "revision");
}

int64_t EtcdClient::deleteRange(const std::string& key, const std::string& range_end) {
  json req = {{"key", base64Encode(key)}};
  if (!range_end.empty()) req["range_end"] = base64Encode(range_end);
  return number(json::parse(call("/v3/kv/deleterange", req.dump(), true)), "deleted");
}

EtcdTxnResult EtcdClient::txn(const std::vector<EtcdCompare>& compare, const std::vector<EtcdOp>& success,
                              const std::vector<EtcdOp>& failure) {
  json req = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const EtcdCompare& c : compare) req["compare"].push_back(compareJson(c));
  for (const EtcdOp& op : success) req["success"].push_back(opJson(op));
  for (const EtcdOp& op : failure) req["failure"].push_back(opJson(op));
  json reply = json::parse(call("/v3/kv/txn", req.dump(), false));
  EtcdTxnResult out;
  out.succeeded = reply.value("succeeded", false);
  out.revision = number(reply.value("header", json::object()), "revision");
  if (auto it = reply.find("responses"); it != reply.end() && it->is_array())
    for (const json& r : *it)
      if (auto range = r.find("response_range"); range != r.end()) out.ranges.push_back(keyValues(*range));
  return out;
}

int64_t EtcdClient::grantLease(int64_t ttl_seconds) {
  json reply = json::parse(call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_seconds)}}.dump(), true));
  if (reply.contains("error") && reply["error"].is_string() && !reply["error"].get<std::string>().empty())
    throw Error(ErrorCode::kIo,
                "etcd " + endpointsText() + ": lease grant: " + reply["error"].get<std::string>());
  return number(reply, "ID");
}

int64_t EtcdClient::keepAlive(int64_t lease) {
  // The gateway streams the replies of a keepalive stream; one request, one reply, then it ends.
  json reply = json::parse(call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump(), true));
  return number(reply.value("result", json::object()), "TTL");
}

void EtcdClient::revokeLease(int64_t lease) {
  call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump(), true);
}

std::vector<EtcdMemberStatus> EtcdClient::status() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<EtcdMemberStatus> out;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    EtcdMemberStatus s;
    s.endpoint = endpoints_[i].text();
    HttpConnection& c = *connections_[i];
    c.io_timeout = std::min(timeout_, milliseconds(2000));
    try {
      HttpResponse r = c.request("POST", "/v3/maintenance/status", "{}");
      json doc = json::parse(r.body);
      if (r.status != 200) {
        s.error = "HTTP " + std::to_string(r.status) + ": " + doc.value("message", r.body.substr(0, 200));
      } else {
        s.reachable = true;
        s.version = doc.value("version", "");
        s.member_id =
            static_cast<uint64_t>(std::stoull(doc.value("header", json::object()).value("member_id", "0")));
        s.leader_id = static_cast<uint64_t>(std::stoull(doc.value("leader", "0")));
        s.db_size = number(doc, "dbSize");
      }
    } catch (const std::exception& e) {
      s.error = e.what();
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace poolrun::pool
