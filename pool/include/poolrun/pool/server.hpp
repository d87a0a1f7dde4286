#pragma once

// poold's engine: the pool for many nodes behind an HTTP/JSON API (see pool/README.md for the
// routes). State lives in memory and in DIR/pool.sqlite; every change is committed (group commit:
// the changes of concurrent requests share one transaction) before any reply that depends on it.

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "poolrun/pool/store.hpp"

namespace poolrun::pool {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 7450;  // 0: any free port (bind() returns it)
  std::filesystem::path state_dir;
  std::filesystem::path token_file;
  Durability durability = Durability::kNormal;
  size_t max_body_bytes = size_t{1} << 20;
  int threads = 64;  // connections served at once (each kept-alive client holds one)
  std::chrono::seconds stale_after{30};
};

struct TokenEntry {
  std::string owner;
  bool admin = false;
};

// Parses a token file: one `TOKEN OWNER ROLE` line per token, ROLE user or admin, `#` comments.
// Throws poolrun::Error (kBadInput) with "FILE:LINE: what" on a malformed line.
std::map<std::string, TokenEntry> parseTokenFile(const std::string& text, const std::string& file);

class PoolServer {
 public:
  // Takes DIR/poold.lock (one poold per state directory), opens and loads the state, reads the
  // token file. Throws poolrun::Error naming what is wrong.
  explicit PoolServer(ServerOptions options);
  ~PoolServer();
  PoolServer(const PoolServer&) = delete;
  PoolServer& operator=(const PoolServer&) = delete;

  void registerNodes(const std::vector<topo::ClusterNode>& nodes);
  int bind();  // binds host:port; returns the port. Throws kIo when it cannot.
  void run();  // serves until stop()
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace poolrun::pool
