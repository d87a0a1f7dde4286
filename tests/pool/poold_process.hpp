#pragma once

// A poold started by a test on 127.0.0.1 (port 0: one the kernel picks; or a given one, to restart
// a poold where its clients expect it), and stopped (or killed) by it.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/fixtures.hpp"

namespace poolrun::test {

// The cluster file most pool tests run on: 16 HGX H100 nodes (clusters/hgx-h100.toml).
inline std::string hgxCluster() {
  return (sourceDir() / "clusters" / "hgx-h100.toml").string();
}

class PooldProcess {
 public:
  PooldProcess(const std::filesystem::path& state, const std::filesystem::path& tokens,
               const std::vector<std::string>& extra = {}, int port = 0);
  ~PooldProcess();
  PooldProcess(const PooldProcess&) = delete;
  PooldProcess& operator=(const PooldProcess&) = delete;

  const std::string& uri() const { return uri_; }
  int port() const { return port_; }
  void stop();   // SIGTERM, wait
  void kill9();  // SIGKILL, wait
  pid_t pid() const { return pid_; }
  // Waits until it serves as the leader (GET /healthz 200): a poold on etcd prints its address as a
  // standby first. False when `limit` passes first.
  bool waitServing(std::chrono::milliseconds limit = std::chrono::seconds(15)) const;
  // Its exit status once it exits by itself (128+N for signal N), -1 when `limit` passes first.
  int waitExit(std::chrono::milliseconds limit);

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string uri_;
};

// poold replicas of one pool on a test's etcd: one etcd prefix, a port and a state directory each,
// --etcd-ttl 3 (a standby takes over about 3 s after the leader dies; the default 5 s would add
// 2 s per failover). The first started leads.
class PooldReplicas {
 public:
  static constexpr int kEtcdTtl = 3;
  // `etcd`: the store's URI (EtcdCluster::uri()); `extra`: more options for every replica.
  PooldReplicas(const std::string& etcd, int n, const std::filesystem::path& dir,
                std::filesystem::path tokens, std::vector<std::string> extra = {});
  void start(int i);  // replica i, again after a kill
  PooldProcess& at(int i) { return *procs_[static_cast<size_t>(i)]; }
  int port(int i) const { return ports_[static_cast<size_t>(i)]; }
  const std::string& prefix() const { return prefix_; }
  // Every replica, as clients name the pool.
  std::string uri() const;
  // The replica that serves as the leader (GET /healthz 200; a standby answers 503, a dead or
  // stopped one nothing), other than `except`; -1 when none does within `limit`.
  int leader(std::chrono::milliseconds limit, int except = -1) const;

 private:
  std::filesystem::path dir_, tokens_;
  std::string etcd_, prefix_;
  std::vector<std::string> extra_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<PooldProcess>> procs_;
};

// The poold options that keep its state in `store`: "sqlite" (the state directory: none) or "etcd"
// (sharedEtcd(), under a prefix of its own, advertising http://127.0.0.1:PORT). A test that uses
// "etcd" starts with POOLRUN_TEST_REQUIRE_ETCD().
std::vector<std::string> storeOptions(const std::string& store, int port);

// One three-member etcd cluster for the whole test program, started on first use and stopped at
// its exit (or with it, when it is killed).
class EtcdCluster;
EtcdCluster& sharedEtcd();

// Runs a program to completion; returns its exit status, stdout in `out`.
int runProgram(const std::vector<std::string>& argv, std::string* out = nullptr,
               const std::vector<std::string>& env = {});

// The token file every test poold reads: alice and bob are users, root is the administrator.
constexpr const char* kTokens =
    "# test tokens\n"
    "tok-alice-0123456789 alice user\n"
    "tok-bob-0123456789 bob user\n"
    "tok-root-0123456789 root admin\n";

}  // namespace poolrun::test
