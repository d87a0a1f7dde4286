#pragma once

// poold's command line as a value: parsePooldOptions reads it (every check that needs no network),
// runPoold (poold_main's) serves it.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/pool/etcd_client.hpp"
#include "poolrun/pool/server.hpp"

namespace poolrun::pool {

struct PooldOptions {
  enum class Action { kServe, kHelp, kVersion };
  Action action = Action::kServe;
  ServerOptions server;          // its live.node_timeout already defaulted from the heartbeat interval
  std::string cluster;           // --cluster FILE: nodes registered at start
  std::string store = "sqlite";  // or etcd://HOST:PORT[,...]
  std::string etcd_prefix = "/poolrun";
  EtcdSecurity etcd_security;  // --etcd-ca, --etcd-cert, --etcd-key, --etcd-user, --etcd-password-file
  std::string advertise;       // with etcd: the URL clients reach this replica at
  bool insecure_http = false;  // plain HTTP allowed on an address other than loopback
  std::chrono::seconds etcd_ttl{5};
  size_t etcd_max_txn_ops;
  PooldOptions();
};

// poold's arguments (without the program's name) as options. Throws poolrun::Error kBadInput
// naming the option and what it expects; --help or --version stop the reading there.
PooldOptions parsePooldOptions(const std::vector<std::string>& args);

// poold --help.
std::string pooldUsage();

}  // namespace poolrun::pool
