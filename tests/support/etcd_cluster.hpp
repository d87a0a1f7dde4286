#pragma once

// An etcd cluster for tests: N members (3 by default) of /usr/bin/etcd on free 127.0.0.1 ports, with
// their data in a temporary directory, started by the constructor (which waits until every member
// is healthy) and stopped by the destructor however the test ends (SIGTERM, then SIGKILL after 5 s;
// the data removed). Members can be killed and started again to test the loss of a quorum.
//
// Tests that need etcd start with POOLRUN_TEST_REQUIRE_ETCD(): without /usr/bin/etcd they are
// skipped, saying why, or fail where POOLRUN_REQUIRE_ETCD=1 (scripts/test.sh sets it: in CI a
// missing etcd is a failure).

#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"

namespace poolrun::test {

// A port on 127.0.0.1 that the kernel says is free now (bound to port 0 and released).
int freePort();
// GET `path` from 127.0.0.1:port (HTTP/1.0): the whole reply, "" where none came within `limit`.
std::string httpGet(int port, const std::string& path, std::chrono::milliseconds limit);

class EtcdCluster {
 public:
  static constexpr const char* kBinary = "/usr/bin/etcd";
  // Whether etcd can run here; where not, `why` says what is missing.
  static bool available(std::string& why);

  // TLS on both the client and the peer side, each asking for a client certificate signed by `ca`
  // (--client-cert-auth); `cert` (with IP:127.0.0.1, for servers and clients) serves every member.
  // /health is then on a plain metrics port of each member.
  struct Tls {
    std::string ca, cert, key;
  };

  // `token_ttl`: with authentication on, how long its tokens live (etcd's --auth-token-ttl).
  explicit EtcdCluster(int members = 3, const Tls* tls = nullptr, int token_ttl = 300);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // etcd://127.0.0.1:C1,127.0.0.1:C2,... (poold --store); etcds:// with TLS.
  std::string uri() const;
  // Turns etcd's authentication on with `etcdctl` (over TLS with `client` as its certificate): a
  // root user and `user`, whose role may read and write the keys under `prefix`. Tokens live
  // the constructor's `token_ttl`. Throws std::runtime_error with etcdctl's words where it fails.
  void enableAuth(const std::string& user, const std::string& password, const std::string& prefix,
                  const std::string& client_cert, const std::string& client_key);
  int clientPort(int member) const { return members_[static_cast<size_t>(member)].client_port; }
  int size() const { return static_cast<int>(members_.size()); }

  void kill(int member);   // SIGKILL: a machine lost
  void start(int member);  // again, with its data: it rejoins the cluster
  // Whether `member` answers GET /health with {"health":"true"} (it has a leader and a quorum).
  bool healthy(int member) const;
  // Waits until every running member is healthy; false when `limit` passes first.
  bool waitHealthy(std::chrono::milliseconds limit) const;

 private:
  struct Member {
    std::string name;
    int client_port = 0, peer_port = 0, metrics_port = 0;
    pid_t pid = -1;
  };
  void launch(Member& m, bool fresh);
  void stop(Member& m);

  TempDir dir_;
  std::string token_;
  std::string initial_cluster_;
  std::vector<Member> members_;
  std::optional<Tls> tls_;
  int token_ttl_ = 300;
};

}  // namespace poolrun::test

#define POOLRUN_TEST_REQUIRE_ETCD()                                   \
  do {                                                                \
    std::string etcd_why_missing;                                     \
    if (!::poolrun::test::EtcdCluster::available(etcd_why_missing)) { \
      const char* require = std::getenv("POOLRUN_REQUIRE_ETCD");      \
      if (require != nullptr && std::string(require) == "1") {        \
        FAIL() << etcd_why_missing << " (POOLRUN_REQUIRE_ETCD=1)";    \
      }                                                               \
      GTEST_SKIP() << etcd_why_missing;                               \
    }                                                                 \
  } while (0)
