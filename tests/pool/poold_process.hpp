#pragma once

// A poold started by a test on 127.0.0.1 (port 0: one the kernel picks; or a given one, to restart
// a poold where its clients expect it), and stopped (or killed) by it.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
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
