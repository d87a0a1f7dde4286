#pragma once

// A client of etcd's v3 API through its JSON gateway (etcd 3.4: POST CLIENT-URL/v3/...), over the
// project's own HTTP client (http_connection.hpp): keys and values travel base64, 64-bit integers
// as strings. It speaks to one endpoint at a time and moves to the next one given when an endpoint
// cannot be reached, or answers that it has no leader.
//
// Every call is bounded by the timeouts and throws poolrun::Error (kIo) naming the endpoint and
// what went wrong. A call whose reply was lost may have been applied (put, txn): the message says
// "outcome unknown". Thread-safe (one call at a time).

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/common/error.hpp"

namespace poolrun {
class HttpConnection;
}

namespace poolrun::pool {

// A put or transaction whose reply was lost (the member died, the connection broke): it may or may
// not have been applied. The caller finds out by reading what it wrote.
class EtcdOutcomeUnknown : public Error {
 public:
  explicit EtcdOutcomeUnknown(const std::string& what) : Error(ErrorCode::kIo, what) {}
};

struct EtcdEndpoint {
  std::string host;
  int port = 0;
  bool tls = false;  // etcds://
  std::string text() const { return host + ":" + std::to_string(port); }
};

// "etcd://HOST:PORT[,HOST:PORT...]", or "etcds://..." for TLS; throws kBadInput naming the URI and
// the bad part.
std::vector<EtcdEndpoint> parseEtcdUri(const std::string& uri);

// How poold reaches a secured etcd (poold --etcd-ca, --etcd-cert, --etcd-key, --etcd-user,
// --etcd-password-file). TLS is on for etcds:// or where any of the files is given.
struct EtcdSecurity {
  std::string ca_file;    // the CAs of the members' certificates (PEM); empty: the system's
  std::string cert_file;  // poold's client certificate (PEM) and its key, where etcd asks for one
  std::string key_file;   // (--client-cert-auth)
  // etcd's authentication (`etcdctl auth enable`): the user, and a file holding its password (its
  // first line; read again at each authentication, so a new password needs no restart).
  std::string user;
  std::string password_file;
  bool tls() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

struct EtcdKeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

// One comparison of a transaction: `target` of `key` `result` the number (or the value).
struct EtcdCompare {
  enum class Target { kCreate, kMod, kVersion, kLease, kValue };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  Target target = Target::kCreate;
  Result result = Result::kEqual;
  int64_t number = 0;
  std::string value;
};

// One operation of a transaction: a put (with the lease, 0: none), a deletion or a read of `key`
// (with range_end: the keys in [key, range_end)).
struct EtcdOp {
  enum class Kind { kPut, kDelete, kRange };
  Kind kind = Kind::kPut;
  std::string key, value, range_end;
  int64_t lease = 0;
};

struct EtcdTxnResult {
  bool succeeded = false;
  int64_t revision = 0;                           // of the store after the transaction
  std::vector<std::vector<EtcdKeyValue>> ranges;  // what each kRange operation of the branch read
};

struct EtcdMemberStatus {
  std::string endpoint;
  bool reachable = false;
  std::string error;  // where not reachable
  std::string version;
  uint64_t member_id = 0, leader_id = 0;
  int64_t db_size = 0;
};

class EtcdClient {
 public:
  // Reads the security's files now (throws poolrun::Error naming one that is wrong); authenticates
  // at the first call.
  explicit EtcdClient(std::vector<EtcdEndpoint> endpoints,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
                      EtcdSecurity security = {});
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // The keys in [key, range_end) (range_end empty: `key` alone); the store's revision in `revision`.
  std::vector<EtcdKeyValue> range(const std::string& key, const std::string& range_end = "",
                                  int64_t* revision = nullptr);
  int64_t put(const std::string& key, const std::string& value, int64_t lease = 0);  // the revision
  int64_t deleteRange(const std::string& key, const std::string& range_end = "");    // keys deleted
  EtcdTxnResult txn(const std::vector<EtcdCompare>& compare, const std::vector<EtcdOp>& success,
                    const std::vector<EtcdOp>& failure = {});
  int64_t grantLease(int64_t ttl_seconds);  // the lease's id
  // Renews a lease; its remaining TTL in seconds, 0 where the lease no longer exists.
  int64_t keepAlive(int64_t lease);
  void revokeLease(int64_t lease);
  // Each endpoint's status, asked separately (a member that does not answer says why).
  std::vector<EtcdMemberStatus> status();

  // The end of the range of every key that starts with `prefix`.
  static std::string prefixEnd(const std::string& prefix);
  std::string endpointsText() const;

 private:
  std::string call(const std::string& path, const std::string& body, bool idempotent);
  // With a user: a token from /v3/auth/authenticate, given to every connection (mu_ held).
  void authenticate(HttpConnection& c, const EtcdEndpoint& at);
  // What an etcd refusal means for poold's operator, where it is one of authentication's.
  std::string refusalText(const std::string& message) const;

  std::vector<EtcdEndpoint> endpoints_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  size_t current_ = 0;
  std::vector<std::unique_ptr<HttpConnection>> connections_;
  EtcdSecurity security_;
  std::string auth_token_;  // the current one; empty: none yet (or no user)
};

std::string base64Encode(const std::string& bytes);
// Throws kIo on text that is not base64.
std::string base64Decode(const std::string& text);

}  // namespace poolrun::pool
